// AVX-512 ceilings: zmm loads summed with vpaddd, vfmadd231ps zmm and vdpbf16ps zmm chains.
#include <algorithm>

#include "bench_chains.hpp"
#include "testkit/bench_simd.hpp"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512BF16__)
#include <immintrin.h>

namespace attn_bench {
namespace {

// Lane sum through memory: GCC 12's _mm512_reduce_* helpers trip -Wuninitialized.
uint64_t lanes_sum(__m512i v) {
  alignas(64) uint32_t x[16];
  _mm512_store_si512(x, v);
  uint64_t s = 0;
  for (uint32_t e : x) s += e;
  return s;
}


// Two loads a cycle with a one-cycle add each: 8 accumulators keep every load independent.
uint64_t read_sum(const void* p, std::size_t bytes) {
  const auto* q = static_cast<const std::byte*>(p);
  __m512i a[8];
  for (auto& x : a) x = _mm512_setzero_si512();
  for (std::size_t i = 0; i < bytes; i += 512)
    for (int j = 0; j < 8; ++j) a[j] = _mm512_add_epi32(a[j], _mm512_load_si512(q + i + 64 * j));
  for (int j = 1; j < 8; ++j) a[0] = _mm512_add_epi32(a[0], a[j]);
  return lanes_sum(a[0]);
}

// 24 chains: more than latency × instructions per cycle (4 × 2 for FMA, up to 6 × 2 for the bf16 dot)
// on current cores, and with the two operands still inside the 32 zmm registers.
constexpr int kChains = 24;

double fma(long iters) {
  const __m512 b = _mm512_set1_ps(1e-3f), c = _mm512_set1_ps(1e-3f);
  run_chains<kChains, __m512>(
      iters, [](int i) { return _mm512_set1_ps(float(i)); },
      [&](__m512 acc) { return _mm512_fmadd_ps(b, c, acc); },  // accumulator last: the 231 form
      [](__m512 x, __m512 y) { return _mm512_add_ps(x, y); });
  return double(iters) * kChains * 16 * 2;
}

double dot_bf16(long iters) {
  const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3f80), c = (__m512bh)_mm512_set1_epi16(0x3a00);  // 1.0, ~5e-4
  run_chains<kChains, __m512>(
      iters, [](int i) { return _mm512_set1_ps(float(i)); }, [&](__m512 acc) { return _mm512_dpbf16_ps(acc, b, c); },
      [](__m512 x, __m512 y) { return _mm512_add_ps(x, y); });
  return double(iters) * kChains * 64;  // 32 bf16 products and their adds into 16 lanes
}

const SimdKernels kTable{"zmm loads + vpaddd", read_sum, "vfmadd231ps zmm", fma, "vdpbf16ps zmm", dot_bf16};

}  // namespace

const SimdKernels* simd_avx512() { return &kTable; }

}  // namespace attn_bench

#else
namespace attn_bench {
const SimdKernels* simd_avx512() { return nullptr; }
}  // namespace attn_bench
#endif
