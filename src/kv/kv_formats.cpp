// The byte formats' element codecs: fp8_ds_mla entries, per-token-head int8 / fp8, int4 (rotated),
// nvfp4 (see include/attn/kv_cache.hpp for each format; turboquant lives in turboquant.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "attn/error.hpp"
#include "attn/kv_cache.hpp"
#include "attn/limits.hpp"
#include "attn/numeric.hpp"

namespace attn {

namespace ds_mla {

void quantize_entry(const float* src, void* entry) {
  auto* e = static_cast<uint8_t*>(entry);
  for (int t = 0; t < kTiles; ++t) {
    const float* tile = src + t * kTile;
    float amax = 0.0f;
    for (int i = 0; i < kTile; ++i) amax = std::max(amax, std::fabs(tile[i]));
    // An all-zero tile gets the smallest normal scale (vLLM's guard): its values stay 0, never 0/0.
    const float scale = std::max(amax / kFp8E4M3Max, std::numeric_limits<float>::min());
    for (int i = 0; i < kTile; ++i) e[t * kTile + i] = f32_to_fp8_e4m3(tile[i] / scale);
    std::memcpy(e + kScalesOffset + 4 * t, &scale, 4);
  }
  for (int i = 0; i < kRope; ++i) {
    const uint16_t b = f32_to_bf16(src[kRank + i]);
    std::memcpy(e + kRopeOffset + 2 * i, &b, 2);
  }
}

void dequantize_entry(const void* entry, float* dst) {
  const auto* e = static_cast<const uint8_t*>(entry);
  for (int t = 0; t < kTiles; ++t) {
    const float scale = tile_scale(entry, t);
    for (int i = 0; i < kTile; ++i) dst[t * kTile + i] = fp8_e4m3_to_f32(e[t * kTile + i]) * scale;
  }
  for (int i = 0; i < kRope; ++i) {
    uint16_t b;
    std::memcpy(&b, e + kRopeOffset + 2 * i, 2);
    dst[kRank + i] = bf16_to_f32(b);
  }
}

}  // namespace ds_mla

namespace token_head {

float max_code(DType storage) {
  ATTN_REQUIRE(storage == DType::int8 || storage == DType::fp8_e4m3, "storage dtype", to_string(storage),
               "int8 or fp8_e4m3 for a per-token-head cache");
  return storage == DType::int8 ? 127.0f : kFp8E4M3Max;
}

float quantize(const float* src, int32_t n, DType storage, void* codes, int64_t* nonfinite) {
  const float top = max_code(storage);
  float amax = 0.0f;
  int64_t bad = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (!std::isfinite(src[i])) ++bad;
    else amax = std::max(amax, std::fabs(src[i]));
  }
  if (bad) {
    std::memset(codes, 0, std::size_t(n));
    if (nonfinite) *nonfinite += bad;
    return std::numeric_limits<float>::quiet_NaN();
  }
  const float scale = std::max(amax / top, kMinScale), inv = 1.0f / scale;
  for (int32_t i = 0; i < n; ++i) {
    const float q = src[i] * inv;
    if (storage == DType::int8) {
      // Half away from zero, then the truncating conversion (vLLM's order).
      static_cast<int8_t*>(codes)[i] = int8_t(std::clamp(q >= 0 ? q + 0.5f : q - 0.5f, -128.0f, 127.0f));
    } else {
      static_cast<uint8_t*>(codes)[i] = f32_to_fp8_e4m3(q);
    }
  }
  return scale;
}

}  // namespace token_head

namespace int4_head {
namespace {
// vLLM draws its signs with torch.bernoulli(torch.full((n,), 0.5), generator=g) after
// g.manual_seed(0x9E3779B9): torch's CPU generator is mt19937 (32-bit seeding), and its float
// bernoulli takes a word's low 24 bits as u = bits / 2^24 and returns u < p.
struct Signs {
  float v[limits::kMaxHeadSize];
  Signs() {
    std::mt19937 gen(0x9E3779B9u);
    for (float& s : v) s = (gen() & 0xFFFFFFu) < (1u << 23) ? 1.0f : -1.0f;
  }
};
const Signs& signs() {
  static const Signs s;
  return s;
}
float round_half_away(float x) { return float(int32_t(x >= 0 ? x + 0.5f : x - 0.5f)); }
}  // namespace

float rht_sign(int32_t i) { return signs().v[i]; }
const float* rht_signs() { return signs().v; }

float quantize(const float* y, int32_t n, uint8_t* codes, int64_t* nonfinite) {
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  int64_t bad = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (!std::isfinite(y[i])) ++bad;
    lo = std::min(lo, y[i]), hi = std::max(hi, y[i]);
  }
  if (bad) {
    std::memset(codes, 0, std::size_t(n / 2));
    if (nonfinite) *nonfinite += bad;
    return std::numeric_limits<float>::quiet_NaN();
  }
  // vLLM's operations in its order: one division for the scale, one for the zero point, then
  // y · (1 / scale) + z fused, rounded half away from zero and clamped.
  const float scale = std::max((hi - lo) / float(kMaxCode), token_head::kMinScale);
  const float z = std::clamp(round_half_away(-lo / scale), 0.0f, float(kMaxCode)), inv = 1.0f / scale;
  auto code = [&](float v) { return uint8_t(std::clamp(round_half_away(std::fma(v, inv, z)), 0.0f, float(kMaxCode))); };
  for (int32_t i = 0; i + 1 < n; i += 2) codes[i / 2] = uint8_t(code(y[i]) | (code(y[i + 1]) << 4));
  uint32_t u;
  std::memcpy(&u, &scale, 4);
  u = (u & ~uint32_t(0xF)) | uint32_t(z);
  float stored;
  std::memcpy(&stored, &u, 4);
  return stored;
}

void dequantize(const uint8_t* codes, float stored, int32_t n, float* y) {
  const float s = scale_of(stored), z = float(zero_point(stored));
  for (int32_t i = 0; i + 1 < n; i += 2) {
    y[i] = (float(codes[i / 2] & 0xF) - z) * s;
    y[i + 1] = (float(codes[i / 2] >> 4) - z) * s;
  }
}

const uint8_t* pairs_run(const PagedKV& v, int64_t b, int64_t h, bool is_v) {
  return static_cast<const uint8_t*>(v.base) + b * v.block_stride + h * v.head_stride + (is_v ? v.v_offset : 0);
}

void load_vector(const PagedKV& v, int64_t b, int64_t t, int64_t h, bool is_v, int32_t n, uint8_t* codes) {
  if (v.layout != KVLayout::HND_PAIRS) {
    std::memcpy(codes, static_cast<const uint8_t*>(v.base) + kv_element_offset(v, b, t, h, 0, is_v), std::size_t(n / 2));
    return;
  }
  const uint8_t* run = pairs_run(v, b, h, is_v);
  if (!is_v) {
    for (int32_t j = 0; j < n / 2; ++j) codes[j] = run[int64_t(j) * v.block_size + t];
    return;
  }
  const uint8_t* pair = run + (t >> 1) * 2 * v.token_stride;
  const int shift = int(t & 1) * 4;
  for (int32_t j = 0; j < n / 2; ++j)
    codes[j] = uint8_t(((pair[2 * j] >> shift) & 0xF) | (((pair[2 * j + 1] >> shift) & 0xF) << 4));
}

void store_vector(const PagedKV& v, int64_t b, int64_t t, int64_t h, bool is_v, int32_t n, const uint8_t* codes) {
  if (v.layout != KVLayout::HND_PAIRS) {
    std::memcpy(static_cast<uint8_t*>(v.base) + kv_element_offset(v, b, t, h, 0, is_v), codes, std::size_t(n / 2));
    return;
  }
  uint8_t* run = const_cast<uint8_t*>(pairs_run(v, b, h, is_v));
  if (!is_v) {
    for (int32_t j = 0; j < n / 2; ++j) run[int64_t(j) * v.block_size + t] = codes[j];
    return;
  }
  uint8_t* pair = run + (t >> 1) * 2 * v.token_stride;
  const int shift = int(t & 1) * 4;
  const uint8_t keep = uint8_t(0xF0 >> shift);  // the other key's nibble
  for (int32_t j = 0; j < n / 2; ++j) {
    pair[2 * j] = uint8_t((pair[2 * j] & keep) | ((codes[j] & 0xF) << shift));
    pair[2 * j + 1] = uint8_t((pair[2 * j + 1] & keep) | ((codes[j] >> 4) << shift));
  }
}

}  // namespace int4_head

namespace nvfp4 {
uint8_t e2m1_code(float x) {
  // The boundaries of cvt.rn.satfinite.e2m1: a tie goes to the even code (0.25 -> 0, 0.75 -> 1,
  // 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4); the sign stays, zero included.
  const float a = std::fabs(x);
  const uint8_t m = a <= 0.25f ? 0 : a < 0.75f ? 1 : a <= 1.25f ? 2 : a < 1.75f ? 3 : a <= 2.5f ? 4 : a < 3.5f ? 5 : a <= 5.0f ? 6 : 7;
  return uint8_t(m | (std::signbit(x) ? 8 : 0));
}

namespace {
/// One candidate block scale (vLLM's nvfp4_candidate_scale): the stored e4m3 byte and the factor
/// values are multiplied by before rounding to e2m1 (0 when the scale is 0).
struct Candidate {
  uint8_t sf;
  float out;
};
Candidate candidate(float inv_g, float vmax, float denominator) {
  const uint8_t sf = f32_to_fp8_e4m3(inv_g * (vmax * (1.0f / denominator)));
  const float v = fp8_e4m3_to_f32(sf);
  return {sf, v != 0.0f ? 1.0f / (v * (1.0f / inv_g)) : 0.0f};
}
/// Squared error of 16 values reconstructed under candidate c (vLLM's reconstruction error).
float reconstruction_error(const float* x, Candidate c) {
  float e = 0.0f;
  const float back = c.out != 0.0f ? 1.0f / c.out : 0.0f;
  for (int i = 0; i < kGroup; ++i) {
    const float d = c.out == 0.0f ? x[i] : e2m1_value(e2m1_code(x[i] * c.out)) * back - x[i];
    e += d * d;
  }
  return e;
}
}  // namespace

int64_t quantize(const float* x, int32_t n, float inv_g, bool four_over_six, uint8_t* row, int64_t* nonfinite) {
  uint8_t* scales = row + n / 2;
  int64_t saturated = 0;
  for (int32_t g = 0; g < n / kGroup; ++g) {
    const float* v = x + g * kGroup;
    uint8_t* codes = row + g * kGroup / 2;
    float vmax = 0.0f;
    int bad = 0;
    for (int i = 0; i < kGroup; ++i) {
      bad += !std::isfinite(v[i]);
      vmax = std::max(vmax, std::fabs(v[i]));
    }
    if (bad) {
      if (nonfinite) *nonfinite += bad;
      scales[g] = kNanScale;
      std::memset(codes, 0, kGroup / 2);
      continue;
    }
    Candidate c = candidate(inv_g, vmax, 6.0f);
    if (four_over_six) {
      const Candidate c4 = candidate(inv_g, vmax, 4.0f);
      if (reconstruction_error(v, c4) < reconstruction_error(v, c)) c = c4;
    }
    scales[g] = c.sf;
    if (c.sf == 0x7E)  // the largest scale (448): values beyond 6 of it are clamped
      for (int i = 0; i < kGroup; ++i) saturated += std::fabs(v[i] * c.out) > 6.0f;
    for (int i = 0; i < kGroup; i += 2)
      codes[i / 2] = uint8_t(e2m1_code(v[i] * c.out) | (e2m1_code(v[i + 1] * c.out) << 4));
  }
  return saturated;
}

void dequantize(const uint8_t* row, int32_t n, float* dst) {
  const uint8_t* scales = row + n / 2;
  for (int32_t i = 0; i < n; ++i) {
    const int code = (row[i / 2] >> (4 * (i & 1))) & 0xF;
    dst[i] = e2m1_value(code) * fp8_e4m3_to_f32(scales[i / kGroup]);
  }
}
}  // namespace nvfp4

}  // namespace attn
