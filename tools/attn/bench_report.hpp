#pragma once
// What one `attn bench` run measured, and its three renderings: flat JSON keys, the text table
// and CSV. Measuring is bench.cpp's job; this file only formats.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "testkit/bench_kit.hpp"
#include "bench_sets.hpp"

namespace attn_cli {

struct BenchRow {
  std::string name, kind, variant;  // kind: "decode" / "prefill"
  double ms = 0;
  double figure = 0;    // decode: KV GB/s; prefill: useful GFLOP/s
  // decode: of the all-thread reads sampled next to this shape's runs; prefill: of the matmul
  // peak sampled there. fraction_p90: of the whole run's 90th-percentile ceiling.
  double fraction = 0, fraction_p90 = 0;
  double adjacent_ceiling = 0;  // GB/s or GFLOP/s, the median of those adjacent samples
  std::optional<double> vs_reference;
  /// A quantized cache: the median over calls alternating with the bf16 cache on the same shape
  /// of (this call's time ÷ the bf16 call's), so the host's bandwidth drifts cancel in each pair.
  std::optional<double> vs_bf16;
  int instances = 0;    // batch copies the calls rotate over
};

struct BenchCeilings {
  attn_bench::LastLevelCache llc;
  attn_bench::Pool pool;
  int threads = 0, reps = 0, rounds = 1;
  double load_average = -1;  // 1-minute load when the ceilings were measured (the highest of the rounds); -1 = unknown
  std::string cpu;           // attn_bench::cpu_identity()
  attn_bench::Ceiling read_1t, read_all, read_write_all, fp32_fma_1t, fp32_fma, bf16_dot, amx_bf16;
  /// Best non-AMX matmul throughput: what a vector-unit prefill kernel can reach.
  double matmul_peak() const { return std::max(fp32_fma.value, bf16_dot.value); }
  double matmul_peak_p90() const { return std::max(fp32_fma.p90, bf16_dot.p90); }
  /// All-thread FMA ÷ (threads × one-thread FMA): near 1 when every thread had a core of its
  /// own; lower when something else ran (or the VM's vCPUs share cores). 0 = not measured.
  double core_scaling() const {
    return fp32_fma_1t.value > 0 && threads > 0 ? fp32_fma.value / (threads * fp32_fma_1t.value) : 0;
  }
  /// Below this scaling the run says that the cores were shared.
  static constexpr double kSharedBelow = 0.85;
};

struct BenchResults {
  BenchCeilings ceilings;
  std::vector<BenchRow> rows;
  std::vector<FigureSet> sets;
};

/// Flat keys: "ceiling.*", "<shape>.ms", "<shape>.fraction_of_dram", "fp8_vs_bf16.<shape>", ...
nlohmann::ordered_json bench_json(const BenchResults& r);
void print_bench_table(const BenchResults& r);

}  // namespace attn_cli
