// AVX2 ceilings: ymm loads summed with vpaddd and vfmadd231ps ymm chains (no bf16 dot here).
#include <algorithm>

#include "bench_chains.hpp"
#include "testkit/bench_simd.hpp"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

namespace attn_bench {
namespace {

uint64_t reduce(__m256i* a) {
  for (int j = 1; j < 8; ++j) a[0] = _mm256_add_epi32(a[0], a[j]);
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a[0]);
  uint64_t s = 0;
  for (uint32_t x : lanes) s += x;
  return s;
}

// Eight accumulators: two loads a cycle never wait on an add.
uint64_t read_sum(const void* p, std::size_t bytes) {
  const auto* q = static_cast<const std::byte*>(p);
  __m256i a[8];
  for (auto& x : a) x = _mm256_setzero_si256();
  for (std::size_t i = 0; i < bytes; i += 256)
    for (int j = 0; j < 8; ++j)
      a[j] = _mm256_add_epi32(a[j], _mm256_load_si256(reinterpret_cast<const __m256i*>(q + i + 32 * j)));
  return reduce(a);
}

// 12 chains (> latency 4 × 2 per cycle) leave room for the operands in the 16 ymm registers.
constexpr int kChains = 12;

double fma(long iters) {
  const __m256 b = _mm256_set1_ps(1e-3f), c = _mm256_set1_ps(1e-3f);
  run_chains<kChains, __m256>(
      iters, [](int i) { return _mm256_set1_ps(float(i)); },
      [&](__m256 acc) { return _mm256_fmadd_ps(b, c, acc); },  // accumulator last: the 231 form
      [](__m256 x, __m256 y) { return _mm256_add_ps(x, y); });
  return double(iters) * kChains * 8 * 2;
}

const SimdKernels kTable{"ymm loads + vpaddd", read_sum, "vfmadd231ps ymm", fma, "", nullptr};

}  // namespace

const SimdKernels* simd_avx2() { return &kTable; }

}  // namespace attn_bench

#else
namespace attn_bench {
const SimdKernels* simd_avx2() { return nullptr; }
}  // namespace attn_bench
#endif
