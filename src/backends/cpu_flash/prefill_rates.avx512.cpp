// Prefill path, instruction choice: vdpbf16ps does 32 products per instruction against fp32
// FMA's 16, but its throughput differs by CPU (2× the FMA FLOP rate on AMD Zen 4/5, half of
// it on some Intel parts). The feature flags cannot tell these apart, so the rates are timed
// once per process: 12 independent accumulator chains each (enough to cover the latency on
// every part we know), a few hundred microseconds in all.
#include "cpu/x86_intrinsics.hpp"

#include <time.h>

#include <algorithm>

#include "backends/cpu_flash/prefill.hpp"

namespace attn::cpu_flash::prefill {
namespace {

constexpr int kChains = 12;
constexpr int kIters = 4096;

template <bool Bf16>
__attribute__((noinline)) double seconds_for_loop() {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(float(i) * 1e-3f);
  // Operands behind an asm barrier, so the compiler cannot fold or hoist the arithmetic.
  __m512 a = _mm512_set1_ps(1e-3f), b = _mm512_set1_ps(1.0f);
  __asm__ volatile("" : "+v"(a), "+v"(b));
  // Thread CPU time: a shared machine that deschedules the thread does not count against the
  // instruction.
  timespec t0, t1;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
  for (int it = 0; it < kIters; ++it) {
    for (int i = 0; i < kChains; ++i) {
      if constexpr (Bf16)
        acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)_mm512_castps_si512(a), (__m512bh)_mm512_castps_si512(b));
      else
        acc[i] = _mm512_fmadd_ps(a, b, acc[i]);
    }
    __asm__ volatile("" : "+v"(acc[0]), "+v"(acc[1]), "+v"(acc[2]), "+v"(acc[3]), "+v"(acc[4]), "+v"(acc[5]),
                     "+v"(acc[6]), "+v"(acc[7]), "+v"(acc[8]), "+v"(acc[9]), "+v"(acc[10]), "+v"(acc[11]));
  }
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
  return double(t1.tv_sec - t0.tv_sec) + 1e-9 * double(t1.tv_nsec - t0.tv_nsec);
}

}  // namespace

DotRates measure_dot_rates(int reps) {
  // Interleaved, best of `reps`: a shared, noisy machine only ever slows a run down.
  double tb = 1e30, tf = 1e30;
  for (int r = 0; r < reps; ++r) {
    tb = std::min(tb, seconds_for_loop<true>());
    tf = std::min(tf, seconds_for_loop<false>());
  }
  const double instr = double(kIters) * kChains;
  return {instr * 64 / tb * 1e-9, instr * 32 / tf * 1e-9};
}

bool bf16_dot_beats_fma() {
  static const bool faster = [] {
    seconds_for_loop<false>();  // wake the vector units up before timing
    const DotRates r = measure_dot_rates(5);
    // Equal rates favour fp32 FMA: same speed, 1000× smaller rounding error.
    return r.bf16_dot > 1.1 * r.fp32_fma;
  }();
  return faster;
}

}  // namespace attn::cpu_flash::prefill
