#include "attn/numeric.hpp"

#include <array>
#include <cmath>

namespace attn {

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13));     // inf / NaN
  if (exp == 0) {                                                        // zero / subnormal
    float v = std::ldexp(float(man), -24);
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t f32_to_f16(float f) {
  const uint32_t u = f32_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;               // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;              // rounds to >= 65520 → inf
  if (a < 0x38800000u) {                                    // below min normal: subnormal / zero
    // value / 2^-24, rounded to nearest even
    const float v = bits_f32(a) * 16777216.0f;
    return sign | uint16_t(std::nearbyint(v));
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u);               // RNE on the 13 dropped bits
  return sign | uint16_t((r - 0x38000000u) >> 13);
}

namespace {
// Decoding fp8 is a 256-entry table; computed once from the format's definition.
template <int kExpBits, int kManBits, bool kHasInf>
std::array<float, 256> make_fp8_table() {
  std::array<float, 256> t{};
  constexpr int bias = (1 << (kExpBits - 1)) - 1;
  for (int v = 0; v < 256; ++v) {
    const int sign = v >> 7, e = (v >> kManBits) & ((1 << kExpBits) - 1), m = v & ((1 << kManBits) - 1);
    float x;
    if (kHasInf && e == (1 << kExpBits) - 1) {
      x = m ? NAN : INFINITY;
    } else if (!kHasInf && e == (1 << kExpBits) - 1 && m == (1 << kManBits) - 1) {
      x = NAN;  // e4m3fn: only S.1111.111 is NaN
    } else if (e == 0) {
      x = std::ldexp(float(m), 1 - bias - kManBits);
    } else {
      x = std::ldexp(1.0f + float(m) / float(1 << kManBits), e - bias);
    }
    t[v] = sign ? -x : x;
  }
  return t;
}

const std::array<float, 256>& e4m3_table() { static const auto t = make_fp8_table<4, 3, false>(); return t; }
const std::array<float, 256>& e5m2_table() { static const auto t = make_fp8_table<5, 2, true>(); return t; }

// Round-to-nearest-even encode for a small float format with saturation at `max_code`.
template <int kExpBits, int kManBits>
uint8_t encode_fp8(float f, float max_value, uint8_t max_code, uint8_t nan_code) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  if (std::isnan(f)) return sign | nan_code;
  float a = std::fabs(f);
  if (a >= max_value) return sign | max_code;
  if (a == 0.0f) return sign;               // frexp(0) has no exponent to round against
  constexpr int bias = (1 << (kExpBits - 1)) - 1;
  constexpr int min_exp = 1 - bias;
  int e;
  std::frexp(a, &e);
  e -= 1;                                   // a = 1.m * 2^e
  if (e < min_exp) {                        // subnormal: multiples of 2^(min_exp - man)
    int m = int(std::nearbyint(std::ldexp(a, kManBits - min_exp)));
    return sign | uint8_t(m);               // m == 2^man rolls into the smallest normal code
  }
  int m = int(std::nearbyint(std::ldexp(a, kManBits - e))) - (1 << kManBits);
  if (m == (1 << kManBits)) { m = 0; ++e; }
  const int code = ((e + bias) << kManBits) | m;
  return sign | uint8_t(code > max_code ? max_code : code);
}
}  // namespace

float fp8_e4m3_to_f32(uint8_t v) { return e4m3_table()[v]; }
float fp8_e5m2_to_f32(uint8_t v) { return e5m2_table()[v]; }
uint8_t f32_to_fp8_e4m3(float f) { return encode_fp8<4, 3>(f, kFp8E4M3Max, 0x7e, 0x7f); }
uint8_t f32_to_fp8_e5m2(float f) { return encode_fp8<5, 2>(f, kFp8E5M2Max, 0x7b, 0x7f); }

}  // namespace attn
