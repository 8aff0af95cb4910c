#include "bench_report.hpp"

#include <cstdio>

namespace attn_cli {
namespace {

constexpr double kMiB = 1 << 20;

/// fp8 time ÷ bf16 time per shape measured with both caches (below 1: fp8 is faster).
std::vector<std::pair<std::string, double>> fp8_vs_bf16(const std::vector<BenchRow>& rows) {
  std::vector<std::pair<std::string, double>> out;
  for (const BenchRow& f : rows) {
    const auto at = f.name.rfind("_fp8");
    if (at == std::string::npos) continue;
    const std::string base = f.name.substr(0, at);
    for (const BenchRow& b : rows)
      if (b.name == base + "_bf16") out.emplace_back(base, f.ms / b.ms);
  }
  return out;
}

void put_ceiling(nlohmann::ordered_json& j, const std::string& key, const std::string& unit, const attn_bench::Ceiling& c) {
  j["ceiling." + key + "_" + unit] = c.value;
  j["ceiling." + key + "_instruction"] = c.instruction;
}

}  // namespace

nlohmann::ordered_json bench_json(const BenchResults& r) {
  const BenchCeilings& c = r.ceilings;
  nlohmann::ordered_json j;
  j["threads"] = c.threads;
  // Under the "ceiling." prefix so filtered runs (--filter mixer) still carry what the pool was.
  j["ceiling.pool"] = c.pool.label();
  j["ceiling.pool_bytes"] = c.pool.bytes;
  j["ceiling.llc_bytes"] = c.llc.bytes;
  j["ceiling.llc_source"] = c.llc.source;
  j["ceiling.statistic"] = "median of " + std::to_string(c.reps) +
                           (c.rounds > 1 ? ", then median of " + std::to_string(c.rounds) + " rounds" : "");
  j["ceiling.rounds"] = c.rounds;
  j["ceiling.load_average"] = c.load_average;
  put_ceiling(j, "dram_read_1thread", "gbs", c.read_1t);
  put_ceiling(j, "dram_read", "gbs", c.read_all);
  put_ceiling(j, "dram_read_write", "gbs", c.read_write_all);
  put_ceiling(j, "fp32_fma", "gflops", c.fp32_fma);
  put_ceiling(j, "bf16_dot", "gflops", c.bf16_dot);
  put_ceiling(j, "amx_bf16", "gflops", c.amx_bf16);
  j["ceiling.matmul_peak_gflops"] = c.matmul_peak();
  for (const BenchRow& row : r.rows) {
    const std::string& n = row.name;
    j[n + ".ms"] = row.ms;
    j[n + ".pool"] = c.pool.label();
    j[n + ".instances"] = row.instances;
    if (row.kind == "decode") {
      j[n + ".kv_gbs"] = row.figure;
      j[n + ".fraction_of_dram"] = row.fraction;
      if (row.paged_read_gbs) j[n + ".paged_read_gbs"] = *row.paged_read_gbs;
      if (row.fraction_of_paged_read) j[n + ".fraction_of_paged_read"] = *row.fraction_of_paged_read;
    } else {
      j[n + ".gflops"] = row.figure;
      j[n + ".fraction_of_matmul_peak"] = row.fraction;
    }
    if (row.vs_reference) j[n + ".speedup_vs_reference"] = *row.vs_reference;
  }
  for (const auto& [shape, ratio] : fp8_vs_bf16(r.rows)) j["fp8_vs_bf16." + shape] = ratio;
  for (const FigureSet& s : r.sets)
    for (const NamedFigure& f : s.figures) j[f.key] = f.value;
  return j;
}

void print_bench_table(const BenchResults& r) {
  const BenchCeilings& c = r.ceilings;
  const char* mem = c.pool.dram ? "DRAM" : "cache";
  std::printf("LLC %.0f MiB (L%d, %d instance%s, %s); pool %.0f MiB", c.llc.bytes / kMiB, c.llc.level, c.llc.instances,
              c.llc.instances == 1 ? "" : "s", c.llc.source.c_str(), c.pool.bytes / kMiB);
  if (c.pool.dram)
    std::printf(" (>= 4x LLC): bandwidth figures are DRAM figures\n");
  else
    std::printf(" (< 4x LLC): bandwidth figures are CACHE figures, not DRAM\n");
  std::printf("ceilings (%d threads, median of %d", c.threads, c.reps);
  if (c.rounds > 1)
    std::printf("; every figure below is the median of %d rounds, each round's fractions against its own ceilings", c.rounds);
  std::printf("):\n");
  // Other processes on the cores lower every figure, the ceilings included.
  if (c.load_average > c.threads)
    std::printf("  (load average %.1f on %d threads: other work shared the cores, figures are noisy)\n", c.load_average,
                c.threads);
  auto line = [](const std::string& what, const attn_bench::Ceiling& x, const char* unit) {
    if (x.value > 0)
      std::printf("  %-26s %10.1f %-8s %s\n", what.c_str(), x.value, unit, x.instruction.c_str());
    else
      std::printf("  %-26s %10s %-8s %s\n", what.c_str(), "-", "", x.instruction.c_str());
  };
  line(std::string(mem) + " read, 1 thread", c.read_1t, "GB/s");
  line(std::string(mem) + " read, " + std::to_string(c.threads) + " threads", c.read_all, "GB/s");
  line(std::string(mem) + " read+write, " + std::to_string(c.threads) + " threads", c.read_write_all, "GB/s");
  line("fp32 FMA", c.fp32_fma, "GFLOP/s");
  line("bf16 dot", c.bf16_dot, "GFLOP/s");
  line("AMX bf16", c.amx_bf16, "GFLOP/s");
  if (!r.rows.empty())
    std::printf("%-36s %-10s %9s %14s %9s %9s %9s\n", "shape", "variant", "ms", "figure", "of peak", "of paged", "vs ref");
  for (const BenchRow& row : r.rows) {
    char fig[32], paged[16] = "-", ref[16] = "-";
    std::snprintf(fig, sizeof fig, row.kind == "decode" ? "%.1f GB/s" : "%.0f GFLOP/s", row.figure);
    if (row.fraction_of_paged_read) std::snprintf(paged, sizeof paged, "%.0f%%", 100 * *row.fraction_of_paged_read);
    if (row.vs_reference) std::snprintf(ref, sizeof ref, "%.1fx", *row.vs_reference);
    std::printf("%-36s %-10s %9.3f %14s %8.0f%% %9s %9s\n", row.name.c_str(), row.variant.c_str(), row.ms, fig,
                100 * row.fraction, paged, ref);
  }
  if (!r.rows.empty())
    std::printf("(of peak: decode vs %s read on %d threads, prefill vs max(fp32 FMA, bf16 dot); of paged: vs a pure "
                "read of the same KV rows in the same order and split)\n",
                mem, c.threads);
  for (const auto& [shape, ratio] : fp8_vs_bf16(r.rows)) std::printf("fp8 / bf16 time, %s: %.2f\n", shape.c_str(), ratio);
  for (const FigureSet& s : r.sets) {
    std::printf("\n%s (%s):\n", s.name.c_str(), s.title.c_str());
    for (const NamedFigure& f : s.figures)
      std::printf("  %-44s %12.4g %-8s %s\n", f.key.c_str(), f.value, f.unit.c_str(), f.note.c_str());
  }
}

}  // namespace attn_cli
