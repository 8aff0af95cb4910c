// The product-instruction ceiling the MLA decode roofline is judged against: vdpbf16ps for the
// bf16-dot kernel, fp32 FMA for the avx512 / portable ones, measured on the threads the kernel
// runs on (throughput-bound: 16 independent accumulator chains per thread).
#if defined(__x86_64__)
#include "cpu/x86_intrinsics.hpp"
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "kernels/gather/mla_kernel.hpp"

namespace attn::mla {
namespace {

template <bool BF16>
double chains(long iters) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(1e-3f * float(i));
  const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-7f);
  const __m512bh xb = (__m512bh)_mm512_set1_epi16(0x3f80), yb = (__m512bh)_mm512_set1_epi16(0x3380);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = BF16 ? _mm512_dpbf16_ps(acc[i], xb, yb) : _mm512_fmadd_ps(acc[i], x, y);
  }
  float keep = 0;
  for (int i = 0; i < 16; ++i) keep += _mm512_reduce_add_ps(acc[i]);
  volatile float sink = keep;
  (void)sink;
  return double(iters) * 16 * (BF16 ? 64 : 32);  // flop: 2 per product
}

}  // namespace

double product_peak_gflops(Isa isa, int threads, int samples) {
  if (isa == Isa::amx || isa == Isa::generic) return 0;
  const bool bf16 = isa == Isa::avx512_bf16;
  std::vector<double> g;
  for (int s = 0; s < samples; ++s) {
    double flop = 0;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : flop)
    flop += bf16 ? chains<true>(2'000'000) : chains<false>(2'000'000);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    g.push_back(flop / sec / 1e9);
  }
  std::sort(g.begin(), g.end());
  return g[g.size() / 2];
}

}  // namespace attn::mla
#else
#include "kernels/gather/mla_kernel.hpp"
namespace attn::mla {
double product_peak_gflops(Isa, int, int) { return 0; }
}  // namespace attn::mla
#endif
