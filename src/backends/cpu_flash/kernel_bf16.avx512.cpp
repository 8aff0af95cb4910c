// AVX-512 BF16 build: Q·Kᵀ on vdpbf16ps straight from the bf16 cache rows (32 products per
// instruction, no widening). Exact for bf16 q (the products of two bf16 fit in fp32), so it
// serves bf16 q with a bf16 cache; P·V stays on fp32 FMA.
#define ATTN_CF_NS avx512_bf16
#include "kernels/simd/simd_avx512.hpp"
#include "backends/cpu_flash/kernel_impl.hpp"

namespace attn::cpu_flash {
namespace avx512_bf16 {

struct QkBf16 {
  static constexpr bool kNeedsBf16 = true;

  template <int RB, int KB, bool Tail>
  static void step(__m512* acc, const QTile& q, int r0, const void* const* k, int x, int d) {
    __m512i kv[KB];
    for (int j = 0; j < KB; ++j) {
      const void* p = static_cast<const uint16_t*>(k[j]) + x;
      kv[j] = Tail ? _mm512_maskz_loadu_epi16(__mmask32((1ull << (d - x)) - 1), p) : _mm512_loadu_si512(p);
    }
    for (int i = 0; i < RB; ++i) {
      const __m512i qv = _mm512_loadu_si512(q.b + int64_t(r0 + i) * q.ld + x);
      for (int j = 0; j < KB; ++j) acc[i * KB + j] = _mm512_dpbf16_ps(acc[i * KB + j], (__m512bh)qv, (__m512bh)kv[j]);
    }
  }

  template <class S, KvType T, int RB, int KB>
  static void block(const QTile& q, int r0, const void* const* k, int d, float* s, int lds) {
    static_assert(T == KvType::bf16, "bf16 dot products read bf16 rows only");
    __m512 acc[RB * KB];
    for (auto& a : acc) a = _mm512_setzero_ps();
    int x = 0;
    for (; x + 32 <= d; x += 32) step<RB, KB, false>(acc, q, r0, k, x, d);
    if (x < d) step<RB, KB, true>(acc, q, r0, k, x, d);
    float sums[16];
    Simd::reduce(acc, sums);
    for (int i = 0; i < RB; ++i)
      for (int j = 0; j < KB; ++j) s[i * lds + j] = sums[i * KB + j];
  }
};

}  // namespace avx512_bf16

const KernelTable& kernels_avx512_bf16() {
  static const KernelTable table = [] {
    KernelTable t;
    t.by_kv[int(KvType::bf16)] = &avx512_bf16::run_item<avx512_bf16::Simd, KvType::bf16, avx512_bf16::QkBf16>;
    return t;
  }();
  return table;
}

}  // namespace attn::cpu_flash
