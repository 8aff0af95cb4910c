#pragma once
// What one `attn bench` run measured, and its three renderings: flat JSON keys, the text table
// and CSV. Measuring is bench.cpp's job; this file only formats.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench_kit.hpp"
#include "bench_sets.hpp"

namespace attn_cli {

struct BenchRow {
  std::string name, kind, variant;  // kind: "decode" / "prefill"
  double ms = 0;
  double figure = 0;    // decode: KV GB/s; prefill: useful GFLOP/s
  double fraction = 0;  // decode: of the all-thread read ceiling; prefill: of the matmul peak
  std::optional<double> paged_read_gbs, fraction_of_paged_read;  // decode only
  std::optional<double> vs_reference;
  int instances = 0;    // batch copies the calls rotate over
};

struct BenchCeilings {
  attn_bench::LastLevelCache llc;
  attn_bench::Pool pool;
  int threads = 0, reps = 0, rounds = 1;
  double load_average = -1;  // 1-minute load when the ceilings were measured (the highest of the rounds); -1 = unknown
  attn_bench::Ceiling read_1t, read_all, read_write_all, fp32_fma, bf16_dot, amx_bf16;
  /// Best non-AMX matmul throughput: what a vector-unit prefill kernel can reach.
  double matmul_peak() const { return std::max(fp32_fma.value, bf16_dot.value); }
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
