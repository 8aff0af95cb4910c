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

#if defined(__AVX2__)
#include "backends/cpu_flash/int4_unpack.hpp"
#include "cpu/x86_intrinsics.hpp"
#endif

namespace attn::cpu_flash::ATTN_CF_NS {

#if defined(__AVX512F__) && defined(__AVX512BW__)
namespace tq_detail {
/// The 16 b-bit codes of dims 16g .. 16g + 15 (b = 3 or 4: 2b bytes, code i at bit b·i) as dword
/// lanes: the group's 8 bytes in every 128-bit lane, lane i's four bytes from byte b·i / 8 on
/// (vpshufb), shifted right by b·i % 8. Reads 8 bytes from the group's first: at most 2 past a
/// 3-bit group, which the slot always holds (the key's norm, the value's scale follow the codes).
inline __m512i codes16(const uint8_t* src, int g, int b) {
  int64_t w;
  std::memcpy(&w, src + g * 2 * b, 8);
  const __m512i all = _mm512_set1_epi64(w);
  // Byte windows and shifts per lane i: 4-bit codes from byte i/2, 3-bit ones from byte 3i/8.
  const __m512i win = b == 4 ? _mm512_setr_epi32(0x03020100, 0x03020100, 0x04030201, 0x04030201, 0x05040302, 0x05040302, 0x06050403,
                                                 0x06050403, 0x07060504, 0x07060504, 0x08070605, 0x08070605, 0x09080706, 0x09080706,
                                                 0x0A090807, 0x0A090807)
                             : _mm512_setr_epi32(0x03020100, 0x03020100, 0x03020100, 0x04030201, 0x04030201, 0x04030201, 0x05040302,
                                                 0x05040302, 0x06050403, 0x06050403, 0x06050403, 0x07060504, 0x07060504, 0x07060504,
                                                 0x08070605, 0x08070605);
  const __m512i sh = b == 4 ? _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4)
                            : _mm512_setr_epi32(0, 3, 6, 1, 4, 7, 2, 5, 0, 3, 6, 1, 4, 7, 2, 5);
  return _mm512_and_si512(_mm512_srlv_epi32(_mm512_shuffle_epi8(all, win), sh), _mm512_set1_epi32((1 << b) - 1));
}
}  // namespace tq_detail
#endif

#if defined(__AVX2__)
namespace tq_detail {
inline float f16_at(const uint8_t* p) { return _cvtsh_ss(uint16_t(p[0] | (p[1] << 8))); }
/// The 8 b-bit codes of dims 8g .. 8g + 7 (b = 3 or 4: b bytes, code i at bit b·i) as dword
/// lanes: the group's first 4 bytes in every lane, shifted right by b·i. Reads 4 bytes from the
/// group's first: one past a 3-bit group, which the slot always holds (the key's norm, the
/// value's scale follow the codes).
inline __m256i codes8(const uint8_t* src, int g, int b) {
  int32_t w;
  std::memcpy(&w, src + g * b, 4);
  const __m256i sh = b == 4 ? _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28) : _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21);
  return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(w), sh), _mm256_set1_epi32((1 << b) - 1));
}
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

/// Whether unpack_tq_key_parts(even_odd = true) writes a key in even / odd order: 4-bit keys of
/// whole 32-dim slices, each slice as its 16 even dims then its 16 odd ones (one code byte holds
/// dims 2i and 2i + 1, so the order saves the interleave; q is read in the same order).
inline bool tq_key_even_odd(const turboquant::Format& f, int d) { return f.key_bits == 4 && d % 32 == 0; }

/// The two parts of a key's factor (see unpack_tq_key_parts): factor = norm / √(sq + 1e-16).
struct TqKeyParts {
  float norm = 1.0f, sq = 1.0f;  // 3 / 4 bits: the stored norm and Σ c² of the centroid vector
};
inline float tq_key_factor(const TqKeyParts& p) { return p.norm * (1.0f / std::sqrt(p.sq + 1e-16f)); }

/// One slot's key (d values) into `dst` as fp32 up to one factor per key, whose parts it returns:
/// the centroids (factor norm / |c|), or e4m3 values 2^-8 too small (factor 256: exact fp16 bits,
/// like the decode kernel's e4m3 rows). The key is dst · factor; the decode kernel puts the factor
/// on the key's score rather than on every element, and takes the square roots 16 keys at a time.
/// even_odd: see tq_key_even_odd (otherwise natural order).
inline TqKeyParts unpack_tq_key_parts(const uint8_t* slot, int d, const turboquant::Format& f, const TqCentroids& c16, float* dst,
                                      bool even_odd = false) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
  if (even_odd && tq_key_even_odd(f, d)) {  // 16 code bytes per slice: low nibbles (even dims), then high ones
    const __m512 table = _mm512_load_ps(c16.v);
    const __m512i low = _mm512_set1_epi32(0xF);
    __m512 sq = _mm512_setzero_ps();
    for (int x = 0; x < d; x += 32) {
      const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(slot + x / 2)));
      const __m512 ce = _mm512_permutexvar_ps(_mm512_and_si512(b, low), table);
      const __m512 co = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), table);
      sq = _mm512_fmadd_ps(co, co, _mm512_fmadd_ps(ce, ce, sq));
      _mm512_storeu_ps(dst + x, ce), _mm512_storeu_ps(dst + x + 16, co);
    }
    return {tq_detail::f16_at(slot + d / 2), _mm512_reduce_add_ps(sq)};
  }
  if (d % 16 == 0 && f.key_fp8()) {  // byte → fp16 bits (b & 0x7f) << 7, sign to bit 15; NaN codes stay NaN
    for (int x = 0; x < d; x += 16) {
      const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(slot + x)));
      const __m256i m = _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x7f)), 7);
      __m256i h = _mm256_or_si256(m, _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8));
      const __mmask16 nan = _mm256_cmpeq_epi16_mask(m, _mm256_set1_epi16(0x3f80));
      h = _mm256_mask_mov_epi16(h, nan, _mm256_or_si256(h, _mm256_set1_epi16(0x7e00)));
      _mm512_storeu_ps(dst + x, _mm512_cvtph_ps(h));
    }
    return {256.0f, 1.0f};  // 1 + 1e-16 rounds to 1: the factor is 256 exactly
  }
  if (d % 16 == 0) {  // centroids by index, their squares' sum, and the stored norm
    const int bits = f.key_bits;  // a local: the stores to dst cannot change it (no reloads per group)
    const __m512 table = _mm512_load_ps(c16.v);
    __m512 sq = _mm512_setzero_ps();
    for (int g = 0; g < d / 16; ++g) {
      const __m512 c = _mm512_permutexvar_ps(tq_detail::codes16(slot, g, bits), table);
      sq = _mm512_fmadd_ps(c, c, sq);
      _mm512_storeu_ps(dst + 16 * g, c);
    }
    return {tq_detail::f16_at(slot + (d * bits + 7) / 8), _mm512_reduce_add_ps(sq)};
  }
#elif defined(__AVX2__)
  if (d % 8 == 0 && f.key_fp8()) {  // as above: e4m3 bytes placed in fp16 bits, 2^-8 too small
    for (int x = 0; x < d; x += 8) {
      const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(slot + x)));
      const __m128i m = _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x7f)), 7);
      __m128i h = _mm_or_si128(m, _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8));
      h = _mm_or_si128(h, _mm_and_si128(_mm_cmpeq_epi16(m, _mm_set1_epi16(0x3f80)), _mm_set1_epi16(0x7e00)));
      _mm256_storeu_ps(dst + x, _mm256_cvtph_ps(h));
    }
    return {256.0f, 1.0f};
  }
  if (d % 8 == 0) {  // centroids by index (vpermps on each half of the table, bit 3 picks), Σ c², the norm
    const int bits = f.key_bits;
    const __m256 lo = _mm256_load_ps(c16.v), hi = _mm256_load_ps(c16.v + 8);
    __m256 sq = _mm256_setzero_ps();
    for (int g = 0; g < d / 8; ++g) {
      const __m256i i = tq_detail::codes8(slot, g, bits);
      const __m256 c = _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, i), _mm256_permutevar8x32_ps(hi, i), _mm256_castsi256_ps(_mm256_slli_epi32(i, 28)));
      sq = _mm256_fmadd_ps(c, c, sq);
      _mm256_storeu_ps(dst + 8 * g, c);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(sq), _mm256_extractf128_ps(sq, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return {tq_detail::f16_at(slot + (d * bits + 7) / 8), _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)))};
  }
#endif
  (void)c16, (void)even_odd;
  turboquant::dequantize_key(slot, d, f, dst);
  return {1.0f, 1.0f};
}

/// One slot's key (d values) into `dst` as fp32; `c`: the format's centroids for d.
inline void unpack_tq_key(const uint8_t* slot, int d, const turboquant::Format& f, const TqCentroids& c16, float* dst) {
  const float k = tq_key_factor(unpack_tq_key_parts(slot, d, f, c16, dst));
  if (k != 1.0f)
    for (int x = 0; x < d; ++x) dst[x] *= k;
}

/// One slot's value part (d values, at `v`) into `dst` as fp32.
inline void unpack_tq_value(const uint8_t* v, int d, const turboquant::Format& f, float* dst) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
  if (d % 16 == 0) {
    const int bits = f.value_bits, data = (d * bits + 7) / 8;
    const __m512 scale = _mm512_set1_ps(tq_detail::f16_at(v + data)), mn = _mm512_set1_ps(tq_detail::f16_at(v + data + 2));
    for (int g = 0; g < d / 16; ++g)
      _mm512_storeu_ps(dst + 16 * g, _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(tq_detail::codes16(v, g, bits)), scale), mn));
    return;
  }
#elif defined(__AVX2__)
  if (d % 8 == 0) {  // code · scale + min, as the library's dequantizer rounds it (a product, then a sum)
    const int bits = f.value_bits, data = (d * bits + 7) / 8;
    const __m256 scale = _mm256_set1_ps(tq_detail::f16_at(v + data)), mn = _mm256_set1_ps(tq_detail::f16_at(v + data + 2));
    for (int g = 0; g < d / 8; ++g)
      _mm256_storeu_ps(dst + 8 * g, _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(tq_detail::codes8(v, g, bits)), scale), mn));
    return;
  }
#endif
  turboquant::dequantize_value(v, d, f, dst);
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
/// One slot's value part (d values, a multiple of 16, at `v`) as the bf16 of its codes (exact: 0 ..
/// 15) into `dst`, with the scale and minimum that read them back (value = code · scale + min). The
/// decode kernel's (its head sizes are whole 32-dim slices).
inline void unpack_tq_value_codes(const uint8_t* v, int d, const turboquant::Format& f, uint16_t* dst, float& scale, float& mn) {
  const int bits = f.value_bits, data = (d * bits + 7) / 8;
  scale = tq_detail::f16_at(v + data), mn = tq_detail::f16_at(v + data + 2);
  if (bits == 4) return unpack_int4(v, d, 0, dst);  // two codes per byte, even dim low: int4's packing
  for (int g = 0; g < d / 16; ++g)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 16 * g),
                        (__m256i)_mm512_cvtneps_pbh(_mm512_cvtepi32_ps(tq_detail::codes16(v, g, bits))));
}
#endif

}  // namespace attn::cpu_flash::ATTN_CF_NS
