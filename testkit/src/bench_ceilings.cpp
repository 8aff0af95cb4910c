// The machine's ceilings: every timed run kept (median and 90th percentile reported) on the
// thread count the kernels use, with the instruction stream that was timed.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <vector>

#include "attn/platform.hpp"
#include "testkit/bench_kit.hpp"
#include "testkit/bench_simd.hpp"

namespace attn_bench {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// GFLOP/s of `reps` all-thread runs of `kernel(iters)` (flop per thread); the warm-up run
/// also brings the cores out of their low-power states.
template <class K>
std::vector<double> gflops_runs(int threads, int reps, long iters, K kernel) {
  return runs_after_warmup(reps, [&] {
    double flop = 0;
    const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : flop)
    flop += kernel(iters);
    return flop / since(t0) / 1e9;
  });
}

Ceiling measured(const std::vector<double>& runs, std::string instruction) {
  Ceiling c;
  c.instruction = std::move(instruction);
  c.add(runs);
  return c;
}

}  // namespace

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double at = std::clamp(q, 0.0, 1.0) * double(v.size() - 1);
  const std::size_t lo = std::size_t(at);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (at - double(lo)) * (v[hi] - v[lo]);
}

void Ceiling::add(const std::vector<double>& runs) {
  samples.insert(samples.end(), runs.begin(), runs.end());
  value = quantile(samples, 0.5);
  p90 = quantile(samples, 0.9);
}

ReadStream::ReadStream(int threads, std::size_t bytes)
    : threads_(threads),
      per_(bytes / std::size_t(threads) / 512 * 512),  // each thread its own slice
      // The same allocation path as KV caches (huge pages where the kernel offers them), so the
      // ceiling and the kernels read memory mapped the same way.
      storage_(attn::DType::int8, {int64_t(per_) * threads}) {
  auto* buf = static_cast<std::byte*>(storage_.data());
#pragma omp parallel num_threads(threads)
  {
    // First touch by the thread that reads the slice, so its pages sit on that thread's node.
    std::byte* p = buf + per_ * std::size_t(omp_get_thread_num());
    std::fill(p, p + per_, std::byte{1});
  }
}

// Each pass streams the whole buffer (a DRAM pool: dram_pool_min): what the previous pass
// left in cache is its tail, never what this pass reads first.
double ReadStream::once() {
  const SimdKernels& k = simd();
  const auto* buf = static_cast<const std::byte*>(storage_.data());
  static volatile uint64_t sink = 0;
  uint64_t total = 0;
  const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads_) reduction(+ : total)
  total += k.read_sum(buf + per_ * std::size_t(omp_get_thread_num()), per_);
  const double rate = double(per_) * threads_ / since(t0) / 1e9;
  sink = sink + total;
  return rate;
}

const char* ReadStream::instruction() const { return simd().read_instruction; }

Ceiling read_bandwidth(int threads, std::size_t bytes, int reps) {
  ReadStream stream(threads, bytes);
  return measured(runs_after_warmup(reps, [&] { return stream.once(); }), stream.instruction());
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
  const std::vector<double> gbs = runs_after_warmup(reps, [&] {
    const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads)
    {
      uint64_t* p = buf + words * std::size_t(omp_get_thread_num());
#pragma omp simd
      for (std::size_t i = 0; i < words; ++i) p[i] += 1;
    }
    return 2.0 * double(per) * threads / since(t0) / 1e9;
  });
  return measured(gbs, "in-place load + add + store, 64-bit lanes");
}

Ceiling fp32_fma(int threads, int reps) {
  const SimdKernels& k = simd();
  if (!k.fma) return measured({}, k.fma_instruction);
  return measured(gflops_runs(threads, reps, 2'000'000, k.fma), k.fma_instruction);
}

Ceiling bf16_dot(int threads, int reps) {
  const SimdKernels& k = simd();
  if (!k.dot_bf16 || !attn::detect_cpu().has(attn::CpuFeature::avx512_bf16)) return measured({}, "none (no AVX512-BF16)");
  return measured(gflops_runs(threads, reps, 2'000'000, k.dot_bf16), k.dot_instruction);
}

Ceiling amx_bf16(int threads, int reps) {
  if (!amx_granted()) return measured({}, "none (no AMX-BF16, or the OS did not grant tile data)");
  if (amx_tdpbf16ps(1) == 0) return measured({}, "none (built without AMX flags)");
  return measured(gflops_runs(threads, reps, 200'000, amx_tdpbf16ps), "tdpbf16ps");
}

}  // namespace attn_bench
