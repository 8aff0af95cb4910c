#pragma once
/// nvfp4 rows (e2m1 codes and e4m3 block scales, see attn::nvfp4) unpacked to bf16 rows of
/// e2m1 · block scale: exact (2 + 4 significant bits fit bf16's 8), so the bf16 kernels read them
/// with the cache's global scale on scores and outputs like any per-tensor scale. Compiled per ISA
/// inside the including file's namespace (ATTN_CF_NS), like the kernels that include it.
#include <cstdint>
#include <cstring>

#include "attn/kv_cache.hpp"
#include "attn/numeric.hpp"

#if defined(__AVX2__)
#include "cpu/x86_intrinsics.hpp"
#endif

namespace attn::cpu_flash::ATTN_CF_NS {

#if defined(__AVX2__)
/// The 16 e2m1 values, and the e4m3 block scales as fp32 by byte (a call per block costs more
/// than the block's unpacking).
struct Nvfp4Table {
  alignas(64) float v[16];
  float scale[256];
  Nvfp4Table() {
    for (int c = 0; c < 16; ++c) v[c] = nvfp4::e2m1_value(c);
    for (int c = 0; c < 256; ++c) scale[c] = fp8_e4m3_to_f32(uint8_t(c));
  }
};
inline const Nvfp4Table& nvfp4_table() {
  static const Nvfp4Table t;
  return t;
}
#endif

/// n values (a multiple of 16) of one stored row to bf16 bits.
inline void unpack_nvfp4(const uint8_t* row, int n, uint16_t* dst) {
  const uint8_t* scales = row + n / 2;
#if defined(__AVX512BW__)
  // One block of 16: its 8 code bytes split into nibbles in element order (low nibble first),
  // widened to dword indices of the 16 e2m1 values, times the block scale; the products are exact
  // in fp32 and in bf16, so the bf16 bits are the fp32 bits' upper half.
  const Nvfp4Table& table = nvfp4_table();
  const __m512 values = _mm512_load_ps(table.v);
  const __m128i low = _mm_set1_epi8(0x0F);
  // The bf16 bits of 32 fp32 values: the upper halves of v0's then v1's dwords.
  const __m512i upper = _mm512_setr_epi32(0x00030001, 0x00070005, 0x000B0009, 0x000F000D, 0x00130011, 0x00170015, 0x001B0019, 0x001F001D,
                                          0x00230021, 0x00270025, 0x002B0029, 0x002F002D, 0x00330031, 0x00370035, 0x003B0039, 0x003F003D);
  auto block = [&](__m128i codes, int g) {
    return _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_cvtepu8_epi32(codes), values), _mm512_set1_ps(table.scale[scales[g]]));
  };
  int g = 0;
  for (; g + 2 <= n / nvfp4::kGroup; g += 2) {  // two blocks: 16 code bytes
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + g * 8));
    const __m128i lo = _mm_and_si128(bytes, low), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low);
    const __m512 v0 = block(_mm_unpacklo_epi8(lo, hi), g), v1 = block(_mm_unpackhi_epi8(lo, hi), g + 1);
    _mm512_storeu_si512(dst + g * 16, _mm512_permutex2var_epi16(_mm512_castps_si512(v0), upper, _mm512_castps_si512(v1)));
  }
  if (g < n / nvfp4::kGroup) {  // an odd last block
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + g * 8));
    const __m512 v = block(_mm_unpacklo_epi8(_mm_and_si128(bytes, low), _mm_and_si128(_mm_srli_epi16(bytes, 4), low)), g);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + g * 16), _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16)));
  }
#elif defined(__AVX2__)
  // As above, 8 values per vector: the magnitude by its 3 low bits (vpermps), the sign bit 3
  // moved to bit 31, times the block scale (exact); the upper halves packed to 16 bf16.
  const Nvfp4Table& table = nvfp4_table();
  const __m256 mag = _mm256_load_ps(table.v);
  const __m128i low = _mm_set1_epi8(0x0F);
  const __m256i sign = _mm256_set1_epi32(int32_t(0x80000000u));
  auto eight = [&](__m128i codes, __m256 scale) {
    const __m256i i = _mm256_cvtepu8_epi32(codes);
    const __m256 v = _mm256_or_ps(_mm256_permutevar8x32_ps(mag, i), _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(i, 28), sign)));
    return _mm256_srli_epi32(_mm256_castps_si256(_mm256_mul_ps(v, scale)), 16);
  };
  for (int g = 0; g < n / nvfp4::kGroup; ++g) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + g * 8));
    const __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(bytes, low), _mm_and_si128(_mm_srli_epi16(bytes, 4), low));
    const __m256 scale = _mm256_set1_ps(table.scale[scales[g]]);
    // packus interleaves 128-bit lanes (0-3, 8-11, 4-7, 12-15): the qword permute puts them back.
    const __m256i w = _mm256_packus_epi32(eight(nib, scale), eight(_mm_srli_si128(nib, 8), scale));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + g * 16), _mm256_permute4x64_epi64(w, 0xD8));
  }
#else
  for (int i = 0; i < n; ++i) {
    const float v = nvfp4::e2m1_value((row[i / 2] >> (4 * (i & 1))) & 0xF) * fp8_e4m3_to_f32(scales[i / nvfp4::kGroup]);
    uint32_t u;
    std::memcpy(&u, &v, 4);
    dst[i] = uint16_t(u >> 16);
  }
#endif
}

}  // namespace attn::cpu_flash::ATTN_CF_NS
