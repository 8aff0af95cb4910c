// Prefill throughput against this machine's matmul ceilings measured in the same process
// (skipped unless ATTN_PREFILL_BENCH=1; reps from ATTN_PREFILL_BENCH_REPS). Every variant runs
// once per round, round after round, and medians are taken per variant, so drift on a shared
// machine hits all of them alike. Times are wall clock and CPU time per thread (process CPU
// time / threads): on an oversubscribed machine only the latter compares with the ceilings,
// which are timed in thread CPU time. Stage rows switch parts of the kernel off to show which
// limits: packing alone, Q·Kᵀ alone, P·V alone, softmax alone, the two matmuls without softmax.
//   ATTN_PREFILL_BENCH=1 build/tests/attn_tests --gtest_filter='CpuFlashPrefillBench.*'
// ATTN_PREFILL_BENCH_SHAPE / _VARIANT keep the shapes / variants whose names contain the string
// (one variant alone, for a profiler).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <ctime>
#include <string>
#include <vector>

#include "attn/registry.hpp"
#include "backends/cpu_flash/prefill.hpp"
#include "backends/cpu_flash/tests/cpu_flash_test_util.hpp"
#include "support/test_support.hpp"

namespace attn::cpu_flash::test {
namespace {

using attn::test::Case;
using attn::test::CaseSpec;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Shape {
  const char* name;
  int heads, kv_heads, d, window;
  bool sinks;
  int tokens;
};

/// Useful FLOPs: 4·d·Hq per (query, visible key) pair (Q·Kᵀ and P·V, 2 FLOPs per product).
double useful_flops(const Shape& s) {
  double pairs = 0;
  for (int i = 0; i < s.tokens; ++i) pairs += s.window > 0 ? std::min(i + 1, s.window) : i + 1;
  return 4.0 * s.d * s.heads * pairs;
}

struct Variant {
  std::string name;
  const char* isa;    // ATTN_CPU_ISA while the impl is created
  const char* route;  // ATTN_CPU_PREFILL while the impl is created
  unsigned stages;
  std::unique_ptr<AttentionImpl> impl;
  Workspace ws;
  std::vector<double> ms, cpu_ms;
};

double cpu_now_ms() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return 1e3 * double(t.tv_sec) + 1e-6 * double(t.tv_nsec);
}

TEST(CpuFlashPrefillBench, Throughput) {
  const char* on = std::getenv("ATTN_PREFILL_BENCH");
  if (!on || std::string(on) != "1") GTEST_SKIP() << "set ATTN_PREFILL_BENCH=1 to run";
  if (best_isa(detect_cpu()) < Isa::avx512) GTEST_SKIP() << "no AVX-512";
  const int reps = std::getenv("ATTN_PREFILL_BENCH_REPS") ? std::atoi(std::getenv("ATTN_PREFILL_BENCH_REPS")) : 5;
  const bool bf16_cpu = best_isa(detect_cpu()) >= Isa::avx512_bf16;
  const Shape shapes[] = {{"llama8b 2048 causal", 32, 8, 128, 0, false, 2048}, {"gpt-oss 2048 swa128+sinks", 64, 8, 64, 128, true, 2048}};
  std::string filter = std::getenv("ATTN_PREFILL_BENCH_SHAPE") ? std::getenv("ATTN_PREFILL_BENCH_SHAPE") : "";
  const std::string variant_filter = std::getenv("ATTN_PREFILL_BENCH_VARIANT") ? std::getenv("ATTN_PREFILL_BENCH_VARIANT") : "";
  std::vector<int> thread_counts = {1, 2};
  if (const char* t = std::getenv("ATTN_PREFILL_BENCH_THREADS")) thread_counts = {std::atoi(t)};

  for (const Shape& sh : shapes) {
    if (!filter.empty() && std::string(sh.name).find(filter) == std::string::npos) continue;
    CaseSpec spec;
    spec.config.num_heads = sh.heads, spec.config.num_kv_heads = sh.kv_heads, spec.config.head_size = sh.d;
    spec.config.dtype = DType::bfloat16;
    spec.config.sliding_window = sh.window;
    spec.config.has_sink = sh.sinks;
    spec.seqs = {{0, sh.tokens}};
    spec.block_size = 64;
    spec.seed = 1;
    Case c = attn::test::make_case(spec, "cpu_flash");
    const double flops = useful_flops(sh);

    std::vector<Variant> vs;
    auto add = [&](std::string name, const char* isa, const char* route, unsigned stages) {
      if (name.find(variant_filter) == std::string::npos) return;
      Variant v{std::move(name), isa, route, stages, nullptr, {}, {}, {}};
      ForceIsa force{std::string(isa)};
      setenv("ATTN_CPU_PREFILL", route, 1);
      v.impl = Registry::instance().create("cpu_flash", c.params);
      unsetenv("ATTN_CPU_PREFILL");
      vs.push_back(std::move(v));
    };
    const char* best = bf16_cpu ? "avx512_bf16" : "avx512";
    add("prefill (auto isa)", "auto", "auto", 0);
    if (bf16_cpu) add("prefill fp32 tiles (avx512)", "avx512", "auto", 0);
    add("prefill tile by tile only", best, "auto", prefill::kTileByTile);
    add("general kernel (auto isa)", "auto", "off", 0);
    add("stage: packing only", best, "auto", prefill::kPackOnly);
    add("stage: Q·Kᵀ only", best, "auto", prefill::kSkipSoftmax | prefill::kSkipPv);
    add("stage: P·V only", best, "auto", prefill::kSkipQk | prefill::kSkipSoftmax);
    add("stage: softmax only", best, "auto", prefill::kSkipQk | prefill::kSkipPv);
    add("stage: Q·Kᵀ + P·V, no softmax", best, "auto", prefill::kSkipSoftmax);
    add("stage: none (loads, stores, loop)", best, "auto", prefill::kSkipQk | prefill::kSkipSoftmax | prefill::kSkipPv);
    if (best_isa(detect_cpu()) >= Isa::amx) {
      add("stage amx: Q·Kᵀ only", "amx", "auto", prefill::kSkipSoftmax | prefill::kSkipPv);
      add("stage amx: P·V only", "amx", "auto", prefill::kSkipQk | prefill::kSkipSoftmax);
      add("stage amx: softmax only", "amx", "auto", prefill::kSkipQk | prefill::kSkipPv);
      add("stage amx: Q·Kᵀ + P·V, no softmax", "amx", "auto", prefill::kSkipSoftmax);
    }
    if (bf16_cpu) {
      add("stage fp32: Q·Kᵀ only", "avx512", "auto", prefill::kSkipSoftmax | prefill::kSkipPv);
      add("stage fp32: P·V only", "avx512", "auto", prefill::kSkipQk | prefill::kSkipSoftmax);
    }

    for (int threads : thread_counts) {
      omp_set_num_threads(threads);
      std::vector<double> ceil_bf16, ceil_fma;
      for (Variant& v : vs) v.ms.clear(), v.cpu_ms.clear();
      for (int rep = -1; rep < reps; ++rep) {  // rep −1 warms up
        for (Variant& v : vs) {
          prefill::set_stage_mask_for_measurement(v.stages);
          const double c0 = cpu_now_ms();
          const auto t0 = std::chrono::steady_clock::now();
          {  // plan + run on a kept workspace, as an engine's step (no per-call scratch mapping)
            const auto plan = v.impl->plan(c.md, c.cache->spec());
            v.ws.reserve(plan->workspace_bytes());
            ForwardArgs args;
            args.q = c.q.view(), args.out = c.out.view(), args.cache = c.cache.get(), args.workspace = &v.ws;
            v.impl->run(*plan, args);
          }
          const auto t1 = std::chrono::steady_clock::now();
          const double c1 = cpu_now_ms();
          prefill::set_stage_mask_for_measurement(0);
          if (rep >= 0) v.ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
          if (rep >= 0) v.cpu_ms.push_back((c1 - c0) / threads);
        }
        double b = 0, f = 0;
#pragma omp parallel num_threads(threads) reduction(+ : b, f)
        {
          const prefill::DotRates r = prefill::measure_dot_rates(3);
          b += r.bf16_dot, f += r.fp32_fma;
        }
        ceil_bf16.push_back(b), ceil_fma.push_back(f);
      }
      const double cb = median(ceil_bf16), cf = median(ceil_fma), ceiling = std::max(cb, cf);
      std::printf("\n%s, %d thread(s), %d rounds; ceilings (same run): vdpbf16ps %.0f GFLOP/s, fp32 FMA %.0f GFLOP/s; "
                  "useful %.1f GFLOP\n", sh.name, threads, reps, cb, cf, flops * 1e-9);
      std::printf("  %-34s %9s %9s %9s %9s %9s  (rates on CPU time; stage rows: full-kernel FLOPs)\n", "variant",
                  "wall ms", "cpu ms", "GFLOP/s", "of best", "of FMA");
      for (const Variant& v : vs) {
        const double ms = median(v.cpu_ms), rate = flops / (ms * 1e-3) * 1e-9;
        std::printf("  %-34s %9.2f %9.2f %9.0f %9.3f %9.3f\n", v.name.c_str(), median(v.ms), ms, rate, rate / ceiling,
                    rate / cf);
      }
    }
  }
}

/// Max abs error against the fp64 reference of the shapes above at 300 tokens, per tile kind.
TEST(CpuFlashPrefillBench, ErrorAgainstOracle) {
  const char* on = std::getenv("ATTN_PREFILL_BENCH");
  if (!on || std::string(on) != "1") GTEST_SKIP() << "set ATTN_PREFILL_BENCH=1 to run";
  if (best_isa(detect_cpu()) < Isa::avx512) GTEST_SKIP() << "no AVX-512";
  struct Row {
    const char* name;
    int heads, kv_heads, d, window;
    bool sinks;
    DType io;
    const char* isa;
  };
  const Row rows[] = {
      {"llama shape, bf16, bf16 tiles", 32, 8, 128, 0, false, DType::bfloat16, "avx512_bf16"},
      {"llama shape, bf16, fp32 tiles", 32, 8, 128, 0, false, DType::bfloat16, "avx512"},
      {"llama shape, fp32, fp32 tiles", 32, 8, 128, 0, false, DType::float32, "avx512"},
      {"gpt-oss shape, bf16, bf16 tiles", 64, 8, 64, 128, true, DType::bfloat16, "avx512_bf16"},
      {"llama shape, bf16, AMX tiles", 32, 8, 128, 0, false, DType::bfloat16, "amx"},
      {"gpt-oss shape, bf16, AMX tiles", 64, 8, 64, 128, true, DType::bfloat16, "amx"},
  };
  for (const Row& r : rows) {
    if (std::string(r.isa) == "avx512_bf16" && best_isa(detect_cpu()) < Isa::avx512_bf16) continue;
    if (std::string(r.isa) == "amx" && best_isa(detect_cpu()) < Isa::amx) continue;
    CaseSpec spec;
    spec.config.num_heads = r.heads, spec.config.num_kv_heads = r.kv_heads, spec.config.head_size = r.d;
    spec.config.dtype = r.io, spec.config.sliding_window = r.window, spec.config.has_sink = r.sinks;
    spec.seqs = {{0, 300}};
    spec.seed = 7;
    ForceIsa force{std::string(r.isa)};
    Case c = attn::test::make_case(spec, "cpu_flash");
    attn::test::run_forward(c);
    const std::vector<double> ref = attn::test::reference_attention(c), got = attn::test::output_values(c);
    double max_abs = 0, max_ref = 0, se = 0, sr = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      const double e = got[i] - ref[i];
      max_abs = std::max(max_abs, std::fabs(e)), max_ref = std::max(max_ref, std::fabs(ref[i]));
      se += e * e, sr += ref[i] * ref[i];
    }
    std::printf("  %-34s max abs err %.2e  / max|ref| %.2e  rel L2 %.2e\n", r.name, max_abs, max_abs / max_ref,
                std::sqrt(se / sr));
  }
}

}  // namespace
}  // namespace attn::cpu_flash::test
