// The machine's ceilings, each the median of timed runs (the statistic the kernels get) on the
// thread count the kernels use, with the instruction stream that was timed.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <vector>

#include "attn/platform.hpp"
#include "bench_kit.hpp"
#include "bench_simd.hpp"

namespace attn_bench {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Median GFLOP/s of `reps` all-thread runs of `kernel(iters)` (flop per thread); the warm-up
/// run also brings the cores out of their low-power states.
template <class K>
double median_gflops(int threads, int reps, long iters, K kernel) {
  return median_after_warmup(reps, [&] {
    double flop = 0;
    const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : flop)
    flop += kernel(iters);
    return flop / since(t0) / 1e9;
  });
}

}  // namespace

Ceiling read_bandwidth(int threads, std::size_t bytes, int reps) {
  const SimdKernels& k = simd();
  const std::size_t per = bytes / std::size_t(threads) / 512 * 512;  // each thread its own slice
  // The same allocation path as KV caches (huge pages where the kernel offers them), so the
  // ceiling and the kernels read memory mapped the same way.
  attn::Buffer storage(attn::DType::int8, {int64_t(per) * threads});
  auto* buf = static_cast<std::byte*>(storage.data());
#pragma omp parallel num_threads(threads)
  {
    // First touch by the thread that reads the slice, so its pages sit on that thread's node.
    std::byte* p = buf + per * std::size_t(omp_get_thread_num());
    std::fill(p, p + per, std::byte{1});
  }
  volatile uint64_t sink = 0;
  // Each rep streams the whole buffer (≥ 4× the LLC for a DRAM pool): what the previous rep
  // left in cache is its tail, never what this rep reads first.
  const double gbs = median_after_warmup(reps, [&] {
    uint64_t total = 0;
    const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : total)
    total += k.read_sum(buf + per * std::size_t(omp_get_thread_num()), per);
    const double rate = double(per) * threads / since(t0) / 1e9;
    sink = sink + total;
    return rate;
  });
  return {gbs, k.read_instruction};
}

Ceiling read_write_bandwidth(int threads, std::size_t bytes, int reps) {
  const std::size_t per = bytes / std::size_t(threads) / 512 * 512;
  attn::Buffer storage(attn::DType::int8, {int64_t(per) * threads});
  auto* buf = static_cast<uint64_t*>(storage.data());
  const std::size_t words = per / sizeof(uint64_t);
#pragma omp parallel num_threads(threads)
  {
    uint64_t* p = buf + words * std::size_t(omp_get_thread_num());
    std::fill(p, p + words, uint64_t{1});
  }
  // Each word read, incremented and written back in place: every line crosses the memory bus
  // twice (in, and out when evicted), as a recurrent state updated in place does. GB/s counts
  // both directions.
  const double gbs = median_after_warmup(reps, [&] {
    const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads)
    {
      uint64_t* p = buf + words * std::size_t(omp_get_thread_num());
#pragma omp simd
      for (std::size_t i = 0; i < words; ++i) p[i] += 1;
    }
    return 2.0 * double(per) * threads / since(t0) / 1e9;
  });
  return {gbs, "in-place load + add + store, 64-bit lanes"};
}

Ceiling fp32_fma(int threads, int reps) {
  const SimdKernels& k = simd();
  if (!k.fma) return {0, k.fma_instruction};
  return {median_gflops(threads, reps, 2'000'000, k.fma), k.fma_instruction};
}

Ceiling bf16_dot(int threads, int reps) {
  const SimdKernels& k = simd();
  if (!k.dot_bf16 || !attn::detect_cpu().has(attn::CpuFeature::avx512_bf16)) return {0, "none (no AVX512-BF16)"};
  return {median_gflops(threads, reps, 2'000'000, k.dot_bf16), k.dot_instruction};
}

Ceiling amx_bf16(int threads, int reps) {
  if (!amx_granted()) return {0, "none (no AMX-BF16, or the OS did not grant tile data)"};
  if (amx_tdpbf16ps(1) == 0) return {0, "none (built without AMX flags)"};
  return {median_gflops(threads, reps, 200'000, amx_tdpbf16ps), "tdpbf16ps"};
}

}  // namespace attn_bench
