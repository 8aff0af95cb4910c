#pragma once
/// turboquant slots (see attn::turboquant) unpacked to the fp32 rows the general kernel reads: the
/// key as norm · c / |c| in the rotated space (fp8 keys: their values), the value as code · scale +
/// min. Compiled per ISA inside the including file's namespace (ATTN_CF_NS), like the kernels that
/// include it; the portable builds call the library's scalar dequantizers.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "attn/kv_cache.hpp"
#include "attn/numeric.hpp"

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include "cpu/x86_intrinsics.hpp"
#endif

namespace attn::cpu_flash::ATTN_CF_NS {

#if defined(__AVX512F__) && defined(__AVX512BW__)
namespace tq_detail {
/// The 16 b-bit codes of dims 16g .. 16g + 15 (b = 3 or 4: 2b bytes, code i at bit b·i) as dword
/// lanes. Reads 8 bytes from the group's first: at most 2 past a 3-bit group, which the slot
/// always holds (the key's norm, the value's scale follow the codes).
inline __m512i codes16(const uint8_t* src, int g, int b) {
  uint64_t w;
  std::memcpy(&w, src + g * 2 * b, 8);
  const __m512i all = _mm512_set1_epi64(int64_t(w));
  const __m512i mask = _mm512_set1_epi64((1 << b) - 1);
  const __m512i lo = _mm512_and_si512(_mm512_srlv_epi64(all, _mm512_setr_epi64(0, b, 2 * b, 3 * b, 4 * b, 5 * b, 6 * b, 7 * b)), mask);
  const __m512i hi =
      _mm512_and_si512(_mm512_srlv_epi64(all, _mm512_setr_epi64(8 * b, 9 * b, 10 * b, 11 * b, 12 * b, 13 * b, 14 * b, 15 * b)), mask);
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi64_epi32(lo)), _mm512_cvtepi64_epi32(hi), 1);
}
inline float f16_at(const uint8_t* p) { return _cvtsh_ss(uint16_t(p[0] | (p[1] << 8))); }
}  // namespace tq_detail
#endif

/// The 2^bits centroids of a 3 / 4-bit key format, padded to 16 (what unpack_tq_key looks up).
struct TqCentroids {
  alignas(64) float v[16] = {};
  TqCentroids() = default;
  TqCentroids(int d, const turboquant::Format& f) {
    if (!f.key_fp8()) std::memcpy(v, turboquant::centroids(d, f.key_bits), sizeof(float) << f.key_bits);
  }
};

/// One slot's key (d values) into `dst` as fp32; `c`: the format's centroids for d.
inline void unpack_tq_key(const uint8_t* slot, int d, const turboquant::Format& f, const TqCentroids& c16, float* dst) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
  if (d % 16 == 0 && f.key_fp8()) {  // e4m3 bytes through a 256-entry table
    static const struct Table {
      alignas(64) float v[256];
      Table() {
        for (int c = 0; c < 256; ++c) v[c] = fp8_e4m3_to_f32(uint8_t(c));
      }
    } table;
    for (int x = 0; x < d; x += 16) {
      const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(slot + x)));
      _mm512_storeu_ps(dst + x, _mm512_i32gather_ps(idx, table.v, 4));
    }
    return;
  }
  if (d % 16 == 0) {  // centroids by index, their norm, then the stored norm over it
    const __m512 table = _mm512_load_ps(c16.v);
    __m512 sq = _mm512_setzero_ps();
    for (int g = 0; g < d / 16; ++g) {
      const __m512 c = _mm512_permutexvar_ps(tq_detail::codes16(slot, g, f.key_bits), table);
      sq = _mm512_fmadd_ps(c, c, sq);
      _mm512_storeu_ps(dst + 16 * g, c);
    }
    const float k = tq_detail::f16_at(slot + (d * f.key_bits + 7) / 8) * (1.0f / std::sqrt(_mm512_reduce_add_ps(sq) + 1e-16f));
    const __m512 kv = _mm512_set1_ps(k);
    for (int x = 0; x < d; x += 16) _mm512_storeu_ps(dst + x, _mm512_mul_ps(_mm512_loadu_ps(dst + x), kv));
    return;
  }
#endif
  (void)c16;
  turboquant::dequantize_key(slot, d, f, dst);
}

/// One slot's value part (d values, at `v`) into `dst` as fp32.
inline void unpack_tq_value(const uint8_t* v, int d, const turboquant::Format& f, float* dst) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
  if (d % 16 == 0) {
    const int data = (d * f.value_bits + 7) / 8;
    const __m512 scale = _mm512_set1_ps(tq_detail::f16_at(v + data)), mn = _mm512_set1_ps(tq_detail::f16_at(v + data + 2));
    for (int g = 0; g < d / 16; ++g)
      _mm512_storeu_ps(dst + 16 * g, _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(tq_detail::codes16(v, g, f.value_bits)), scale), mn));
    return;
  }
#endif
  turboquant::dequantize_value(v, d, f, dst);
}

}  // namespace attn::cpu_flash::ATTN_CF_NS
