#pragma once
/// Scalar conversions between fp32 and the 16-bit / 8-bit storage formats. Round-to-nearest-even,
/// NaN preserved, fp8 saturating (vLLM's convention for e4m3: clamp to ±448).
#include <cstdint>
#include <cstring>
#include <cmath>

namespace attn {

inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline float bf16_to_f32(uint16_t h) { return bits_f32(uint32_t(h) << 16); }
/// A bf16 inf or NaN: every exponent bit set.
inline bool bf16_nonfinite(uint16_t h) { return (h & 0x7f80) == 0x7f80; }
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

float fp8_e4m3_to_f32(uint8_t v);
uint8_t f32_to_fp8_e4m3(float f);   // saturates to ±448
float fp8_e5m2_to_f32(uint8_t v);
uint8_t f32_to_fp8_e5m2(float f);   // saturates to ±57344

constexpr float kFp8E4M3Max = 448.0f;
constexpr float kFp8E5M2Max = 57344.0f;

}  // namespace attn
