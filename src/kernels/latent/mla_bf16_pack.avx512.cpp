// Packing for the AVX512-BF16 attend kernel (see mla_bf16.hpp): the chunk's V rows interleaved
// by key pairs, read once from the cache and then shared by every head block, and the exact
// fp8 → bf16 widening of fp8 caches.
#if defined(__x86_64__)
#include "cpu/x86_intrinsics.hpp"

#include <array>

#include "attn/numeric.hpp"
#include "kernels/latent/mla_bf16.hpp"

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
  std::array<uint16_t, 256> e4m3{}, e5m2{};
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
  for (int i = 0; i < n; ++i) dst[i] = t[src[i]];
}

}  // namespace attn::mla::bf16dot
#endif
