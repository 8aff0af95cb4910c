#pragma once
/// int4_per_token_head codes unpacked to bf16 rows (the general kernel and the prefill pack read
/// them as a bf16 per-token-head row). Compiled per ISA inside the including file's namespace
/// (ATTN_CF_NS), like the kernels that include it.
#include <cstdint>
#include <cstring>

#if defined(__AVX2__)
#include "cpu/x86_intrinsics.hpp"
#endif

namespace attn::cpu_flash::ATTN_CF_NS {

/// bf16 bits of a small integer (exact for |v| < 256).
inline uint16_t small_int_bf16(int v) {
  const float f = float(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t(u >> 16);
}

/// n int4 codes (two per byte, even dim low) as bf16 values code − z (exact: |code − z| <= 15),
/// read like a bf16 row of a per-token-head cache (each key's scale on its score and its weight),
/// so bf16 q takes the bf16 dot products.
inline void unpack_int4(const uint8_t* codes, int n, int z, uint16_t* dst) {
  int i = 0;
#if defined(__AVX512BW__)
  // 32 bytes at a time, each zero-extended to a word: its low and its high nibble, plus 15 − z,
  // index a table of the bf16 bits of −15 .. 16; the two words interleave into element order (low
  // nibble = even dim).
  static const struct Table {
    alignas(64) uint16_t v[32];  // bf16 bits of c − 15
    Table() {
      for (int c = 0; c < 32; ++c) v[c] = small_int_bf16(c - 15);
    }
  } table;
  const __m512i t = _mm512_load_si512(table.v), low = _mm512_set1_epi16(0x0F), shift = _mm512_set1_epi16(int16_t(15 - z));
  static constexpr int16_t kLo[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
                                      8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  static constexpr int16_t kHi[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                      24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i ilo = _mm512_loadu_si512(kLo), ihi = _mm512_loadu_si512(kHi);
  for (; i + 32 <= n / 2; i += 32) {
    const __m512i w = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + i)));
    const __m512i even = _mm512_permutexvar_epi16(_mm512_add_epi16(_mm512_and_si512(w, low), shift), t);
    const __m512i odd = _mm512_permutexvar_epi16(_mm512_add_epi16(_mm512_srli_epi16(w, 4), shift), t);
    _mm512_storeu_si512(dst + 2 * i, _mm512_permutex2var_epi16(even, ilo, odd));
    _mm512_storeu_si512(dst + 2 * i + 32, _mm512_permutex2var_epi16(even, ihi, odd));
  }
#elif defined(__AVX2__)
  // 8 bytes at a time: the nibbles in element order (low nibble = even dim), each code − z
  // converted to fp32 (exact) and its upper half kept, packed back into order (packus works per
  // 128-bit lane; the qword permute undoes that).
  const __m128i low = _mm_set1_epi8(0x0F);
  const __m256i zv = _mm256_set1_epi32(z);
  auto eight = [&](__m128i nib) {
    return _mm256_srli_epi32(_mm256_castps_si256(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(nib), zv))), 16);
  };
  for (; i + 8 <= n / 2; i += 8) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i));
    const __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(bytes, low), _mm_and_si128(_mm_srli_epi16(bytes, 4), low));
    const __m256i w = _mm256_packus_epi32(eight(nib), eight(_mm_srli_si128(nib, 8)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 2 * i), _mm256_permute4x64_epi64(w, 0xD8));
  }
#endif
  for (; i < n / 2; ++i) {
    dst[2 * i] = small_int_bf16(int(codes[i] & 0xF) - z);
    dst[2 * i + 1] = small_int_bf16(int(codes[i] >> 4) - z);
  }
}

/// n int4 codes as int8 values code − z (|code − z| <= 15), for the integer dot products of the
/// AVX2 build (kernel_int_dot_avx2.hpp), read like an int8 per-token-head row.
inline void unpack_int4_i8(const uint8_t* codes, int n, int z, int8_t* dst) {
  int i = 0;
#if defined(__AVX2__)
  // 16 bytes at a time: low and high nibbles interleaved back into element order (low = even dim).
  const __m128i low = _mm_set1_epi8(0x0F), zv = _mm_set1_epi8(int8_t(z));
  for (; i + 16 <= n / 2; i += 16) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i));
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(b, low), zv), hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(b, 4), low), zv);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i), _mm_unpacklo_epi8(lo, hi));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i + 16), _mm_unpackhi_epi8(lo, hi));
  }
#endif
  for (; i < n / 2; ++i) {
    dst[2 * i] = int8_t(int(codes[i] & 0xF) - z);
    dst[2 * i + 1] = int8_t(int(codes[i] >> 4) - z);
  }
}

}  // namespace attn::cpu_flash::ATTN_CF_NS
