// turboquant_*: vLLM's TurboQuant presets, the Lloyd-Max centroids, and one slot's K / V parts.
#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <limits>
#include <cstring>
#include <mutex>
#include <vector>

#include "attn/error.hpp"
#include "attn/kv_cache.hpp"
#include "attn/limits.hpp"
#include "attn/numeric.hpp"

namespace attn::turboquant {

Format format_of(KVCacheDType k) {
  switch (k) {
    case KVCacheDType::turboquant_k8v4: return {8, 4};
    case KVCacheDType::turboquant_4bit_nc: return {4, 4};
    case KVCacheDType::turboquant_k3v4_nc: return {3, 4};
    case KVCacheDType::turboquant_3bit_nc: return {3, 3};
    default: break;
  }
  throw Error("kv_cache_dtype=" + std::string(to_string(k)) +
              " invalid: expected a turboquant preset (turboquant_k8v4, turboquant_4bit_nc, turboquant_k3v4_nc, turboquant_3bit_nc)");
}

// In 64 bits and clamped: a spec describes itself (to_string, shape) before validate() has
// checked its sizes, so these see any int32.
namespace {
int32_t clamped(int64_t v) { return int32_t(std::clamp<int64_t>(v, INT32_MIN, INT32_MAX)); }
int64_t key_bytes64(const Format& f, int64_t d) { return f.key_fp8() ? d : (d * f.key_bits + 7) / 8 + 2; }
int64_t value_bytes64(const Format& f, int64_t d) { return (d * f.value_bits + 7) / 8 + 4; }
}  // namespace

int32_t key_bytes(const Format& f, int32_t d) { return clamped(key_bytes64(f, d)); }
int32_t value_bytes(const Format& f, int32_t d) { return clamped(value_bytes64(f, d)); }
int32_t slot_bytes(const Format& f, int32_t d) {
  const int64_t s = key_bytes64(f, d) + value_bytes64(f, d);
  return clamped(s + (s & 1));
}

namespace {

// vLLM's solve_lloyd_max (centroids.py), operation for operation in double: a Gaussian N(0, 1/d),
// levels started evenly over ±3.5σ, 200 Lloyd iterations at most, each interval's centroid by
// 200-step trapezoids, stopping when no centroid moves by 1e-10 (the last move not applied).
std::vector<float> solve_lloyd_max(int32_t d, int bits) {
  const int n = 1 << bits;
  const double sigma2 = 1.0 / d, sigma = std::sqrt(sigma2);
  const double pi = 3.141592653589793;  // math.pi
  auto pdf = [&](double x) { return (1.0 / std::sqrt(2 * pi * sigma2)) * std::exp(-x * x / (2 * sigma2)); };
  auto trapz = [](auto f, double a, double b) {
    constexpr int steps = 200;
    const double h = (b - a) / steps;
    double r = 0.5 * (f(a) + f(b));
    for (int i = 1; i < steps; ++i) r += f(a + i * h);
    return r * h;
  };
  const double lo = -3.5 * sigma, hi = 3.5 * sigma;
  std::vector<double> c(static_cast<std::size_t>(n)), next(c.size()), edges(c.size() + 1);
  for (int i = 0; i < n; ++i) c[std::size_t(i)] = lo + (hi - lo) * (i + 0.5) / n;
  for (int iter = 0; iter < 200; ++iter) {
    edges[0] = lo * 3, edges[std::size_t(n)] = hi * 3;
    for (int i = 0; i + 1 < n; ++i) edges[std::size_t(i) + 1] = (c[std::size_t(i)] + c[std::size_t(i) + 1]) / 2.0;
    double moved = 0.0;
    for (int i = 0; i < n; ++i) {
      const double a = edges[std::size_t(i)], b = edges[std::size_t(i) + 1];
      const double num = trapz([&](double x) { return x * pdf(x); }, a, b);
      const double den = trapz(pdf, a, b);
      next[std::size_t(i)] = den > 1e-15 ? num / den : c[std::size_t(i)];
      moved = std::max(moved, std::fabs(next[std::size_t(i)] - c[std::size_t(i)]));
    }
    if (moved < 1e-10) break;
    c.swap(next);
  }
  std::vector<float> out(c.size());
  for (std::size_t i = 0; i < c.size(); ++i) out[i] = float(c[i]);
  return out;
}

// One table per (power-of-two d, bits): centroids then midpoints.
struct Table {
  std::once_flag once;
  std::vector<float> centroids, midpoints;
};
constexpr int kLogs = 16;
Table& table(int32_t d, int bits) {
  static std::array<std::array<Table, 2>, kLogs> tables;
  ATTN_REQUIRE(d >= 1 && (d & (d - 1)) == 0 && d < (1 << kLogs), "head_size", d, "a power of two for TurboQuant's centroids");
  ATTN_REQUIRE(bits == 3 || bits == 4, "bits", bits, "3 or 4");
  Table& t = tables[std::size_t(__builtin_ctz(uint32_t(d)))][std::size_t(bits - 3)];
  std::call_once(t.once, [&] {
    t.centroids = solve_lloyd_max(d, bits);
    for (std::size_t i = 0; i + 1 < t.centroids.size(); ++i) t.midpoints.push_back((t.centroids[i] + t.centroids[i + 1]) / 2.0f);
  });
  return t;
}

// b-bit codes (b = 3 or 4) at bit b·i, little-endian: 4 bits two per byte, 3 bits eight per 3 bytes.
void pack(const int* codes, int32_t d, int b, uint8_t* dst) {
  std::memset(dst, 0, std::size_t((d * b + 7) / 8));
  for (int32_t i = 0; i < d; ++i) {
    const int bit = i * b;
    dst[bit / 8] = uint8_t(dst[bit / 8] | (codes[i] << (bit % 8)));
    if (bit % 8 + b > 8) dst[bit / 8 + 1] = uint8_t(dst[bit / 8 + 1] | (codes[i] >> (8 - bit % 8)));
  }
}
int unpack(const uint8_t* src, int32_t i, int b) {
  const int bit = i * b;
  const int lo = src[bit / 8], hi = bit % 8 + b > 8 ? src[bit / 8 + 1] : 0;
  return ((lo | (hi << 8)) >> (bit % 8)) & ((1 << b) - 1);
}

void store_f16(uint8_t* dst, float v) {
  const uint16_t h = f32_to_f16(v);
  dst[0] = uint8_t(h & 0xFF), dst[1] = uint8_t(h >> 8);
}
float load_f16(const uint8_t* src) { return f16_to_f32(uint16_t(src[0] | (src[1] << 8))); }

bool all_finite(const float* x, int32_t d, int64_t* bad) {
  int64_t n = 0;
  for (int32_t i = 0; i < d; ++i) n += !std::isfinite(x[i]);
  if (bad) *bad += n;
  return n == 0;
}

}  // namespace

const float* centroids(int32_t d, int bits) { return table(d, bits).centroids.data(); }
const float* midpoints(int32_t d, int bits) { return table(d, bits).midpoints.data(); }

void rotate(float* x, int32_t d, int4_head::HadamardFn had) {
  had(x, d);
  const float inv = 1.0f / std::sqrt(float(d));
  for (int32_t i = 0; i < d; ++i) x[i] *= inv;
}

void quantize_key(const float* x, int32_t d, const Format& f, uint8_t* dst, int64_t* bad) {
  if (f.key_fp8()) {  // e4m3 codes of the values themselves (saturating at ±448, counted)
    for (int32_t i = 0; i < d; ++i) {
      if (bad) *bad += !(std::fabs(x[i]) <= 448.0f);
      dst[i] = f32_to_fp8_e4m3(x[i]);
    }
    return;
  }
  const int32_t mse = (d * f.key_bits + 7) / 8;
  if (!all_finite(x, d, bad)) {  // NaN norm: every score with this key is NaN
    std::memset(dst, 0, std::size_t(mse));
    store_f16(dst + mse, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  float y[limits::kMaxHeadSize];
  float norm2 = 0.0f;
  for (int32_t i = 0; i < d; ++i) norm2 += x[i] * x[i];
  const float norm = std::sqrt(norm2);
  for (int32_t i = 0; i < d; ++i) y[i] = x[i] / (norm + 1e-8f);
  rotate(y, d);
  const float* mid = midpoints(d, f.key_bits);
  const int top = (1 << f.key_bits) - 1;
  int codes[limits::kMaxHeadSize];
  for (int32_t i = 0; i < d; ++i) {  // the number of midpoints at or below y (vLLM's binary search)
    int c = 0;
    while (c < top && y[i] >= mid[c]) ++c;
    codes[i] = c;
  }
  pack(codes, d, f.key_bits, dst);
  store_f16(dst + mse, norm);
}

void quantize_value(const float* x, int32_t d, const Format& f, uint8_t* dst, int64_t* bad) {
  const int32_t data = (d * f.value_bits + 7) / 8;
  if (!all_finite(x, d, bad)) {  // NaN scale: every weighted sum over this value is NaN
    std::memset(dst, 0, std::size_t(data));
    store_f16(dst + data, std::numeric_limits<float>::quiet_NaN());
    store_f16(dst + data + 2, 0.0f);
    return;
  }
  float mn = x[0], mx = x[0];
  for (int32_t i = 1; i < d; ++i) mn = std::min(mn, x[i]), mx = std::max(mx, x[i]);
  const int top = (1 << f.value_bits) - 1;
  float scale = (mx - mn) / float(top);
  scale = scale > 1e-8f ? scale : 1e-8f;
  int codes[limits::kMaxHeadSize];
  for (int32_t i = 0; i < d; ++i) codes[i] = std::clamp(int((x[i] - mn) / scale + 0.5f), 0, top);
  pack(codes, d, f.value_bits, dst);
  store_f16(dst + data, scale);
  store_f16(dst + data + 2, mn);
}

void dequantize_key(const uint8_t* src, int32_t d, const Format& f, float* dst) {
  if (f.key_fp8()) {
    for (int32_t i = 0; i < d; ++i) dst[i] = fp8_e4m3_to_f32(src[i]);
    return;
  }
  const int32_t mse = (d * f.key_bits + 7) / 8;
  const float* c = centroids(d, f.key_bits);
  float sq = 0.0f;
  for (int32_t i = 0; i < d; ++i) {
    dst[i] = c[unpack(src, i, f.key_bits)];
    sq += dst[i] * dst[i];
  }
  const float k = load_f16(src + mse) * (1.0f / std::sqrt(sq + 1e-16f));  // the norm times 1 / |c|
  for (int32_t i = 0; i < d; ++i) dst[i] *= k;
}

void dequantize_value(const uint8_t* src, int32_t d, const Format& f, float* dst) {
  const int32_t data = (d * f.value_bits + 7) / 8;
  const float scale = load_f16(src + data), mn = load_f16(src + data + 2);
  for (int32_t i = 0; i < d; ++i) dst[i] = float(unpack(src, i, f.value_bits)) * scale + mn;
}

}  // namespace attn::turboquant
