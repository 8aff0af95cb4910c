// Packing for the AVX512-BF16 attend kernel (see mla_bf16.hpp): the chunk's V rows interleaved
// by key pairs, read once from the cache and then shared by every head block, and the exact
// fp8 → bf16 widening of fp8 caches.
#if defined(__x86_64__)
#include "cpu/x86_intrinsics.hpp"

#include <array>

#include "attn/numeric.hpp"
#include "kernels/gather/mla_bf16.hpp"

namespace attn::mla::bf16dot {

void pack_v_pairs(const uint16_t* const* rows, int n, int cols, uint32_t* vp) {
  alignas(64) static const uint16_t lo_idx[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
                                                  8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static const uint16_t hi_idx[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                                  24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i lo = _mm512_load_si512(lo_idx), hi = _mm512_load_si512(hi_idx);
  for (int i = 0; 2 * i < n; ++i) {
    // A missing partner (odd n) is a zero row: its P is 0 and 0 · 0 adds nothing.
    const uint16_t* a = rows[2 * i];
    const uint16_t* b = 2 * i + 1 < n ? rows[2 * i + 1] : nullptr;
    uint32_t* dst = vp + size_t(i) * cols;
    for (int c = 0; c < cols; c += 32) {
      const __mmask32 m = c + 32 <= cols ? ~__mmask32(0) : __mmask32((uint64_t(1) << (cols - c)) - 1);
      const __m512i va = a ? _mm512_maskz_loadu_epi16(m, a + c) : _mm512_setzero_si512();
      const __m512i vb = b ? _mm512_maskz_loadu_epi16(m, b + c) : _mm512_setzero_si512();
      _mm512_storeu_si512(dst + c, _mm512_permutex2var_epi16(va, lo, vb));
      if (c + 16 < cols) _mm512_storeu_si512(dst + c + 16, _mm512_permutex2var_epi16(va, hi, vb));
    }
  }
}

namespace {
struct Fp8ToBf16 {
  alignas(64) std::array<uint16_t, 256> e4m3{}, e5m2{};
  Fp8ToBf16() {
    for (int i = 0; i < 256; ++i) {
      e4m3[i] = f32_to_bf16(fp8_e4m3_to_f32(uint8_t(i)));
      e5m2[i] = f32_to_bf16(fp8_e5m2_to_f32(uint8_t(i)));
    }
  }
};
}  // namespace

void fp8_to_bf16(const uint8_t* src, bool e5m2, int n, uint16_t* dst) {
  static const Fp8ToBf16 tables;
  const uint16_t* t = e5m2 ? tables.e5m2.data() : tables.e4m3.data();
  // 32 values at a time: the bf16 of the 7-bit magnitude from the table's first 128 entries
  // (two 64-entry word permutes, bit 6 picks one), then the sign bit moved to bit 15.
  const __m512i t0 = _mm512_load_si512(t), t1 = _mm512_load_si512(t + 32);
  const __m512i t2 = _mm512_load_si512(t + 64), t3 = _mm512_load_si512(t + 96);
  const __m512i mag_bits = _mm512_set1_epi16(0x7f), upper_bit = _mm512_set1_epi16(0x40), sign_bit = _mm512_set1_epi16(0x80);
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i x = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m512i mag = _mm512_and_si512(x, mag_bits);
    const __m512i lower = _mm512_permutex2var_epi16(t0, mag, t1), upper = _mm512_permutex2var_epi16(t2, mag, t3);
    const __m512i v = _mm512_mask_mov_epi16(lower, _mm512_test_epi16_mask(x, upper_bit), upper);
    _mm512_storeu_si512(dst + i, _mm512_or_si512(v, _mm512_slli_epi16(_mm512_and_si512(x, sign_bit), 8)));
  }
  for (; i < n; ++i) dst[i] = t[src[i]];
}

}  // namespace attn::mla::bf16dot
#endif
