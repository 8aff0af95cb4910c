#include "bench_report.hpp"

#include "bench_shapes.hpp"

#include <cstdio>

namespace attn_cli {
namespace {

constexpr double kMiB = 1 << 20;

/// A quantized cache's time ÷ the bf16 cache's on the same shape (below 1: faster), keyed
/// "<shape>.<dtype>_vs_bf16" with dtype the shape-name suffix (fp8, int8_per_token_head, ...):
/// the ratio of calls alternating with the bf16 cache's (BenchRow::vs_bf16, so no bf16 row is
/// needed), else of the two rows' times.
std::vector<std::pair<std::string, double>> quantized_vs_bf16(const std::vector<BenchRow>& rows) {
  using attn::KVCacheDType;
  std::vector<std::pair<std::string, double>> out;
  for (KVCacheDType kv : quantized_kv_dtypes()) {
    const std::string suffix = kv_suffix(kv);
    for (const BenchRow& f : rows) {
      if (f.name.size() <= suffix.size() || f.name.compare(f.name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
      const std::string base = f.name.substr(0, f.name.size() - suffix.size()), key = base + "." + suffix.substr(1) + "_vs_bf16";
      if (f.vs_bf16) {
        out.emplace_back(key, *f.vs_bf16);
        continue;
      }
      for (const BenchRow& b : rows)
        if (b.name == base + "_bf16") out.emplace_back(key, f.ms / b.ms);
    }
  }
  return out;
}

void put_ceiling(nlohmann::ordered_json& j, const std::string& key, const std::string& unit, const attn_bench::Ceiling& c) {
  j["ceiling." + key + "_" + unit] = c.value;
  j["ceiling." + key + ".p50"] = c.value;
  j["ceiling." + key + ".p90"] = c.p90;
  j["ceiling." + key + ".samples"] = c.samples.size();
  j["ceiling." + key + "_instruction"] = c.instruction;
}

std::string rounds_text(int rounds) { return std::to_string(rounds) + (rounds == 1 ? " round" : " rounds"); }

bool cores_shared(const BenchCeilings& c) { return c.threads > 1 && c.core_scaling() > 0 && c.core_scaling() < c.kSharedBelow; }

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
  j["ceiling.statistic"] = "median (p50) and 90th percentile (p90) of every run of " + rounds_text(c.rounds) + ": " +
                           std::to_string(c.reps) + " at the start of each, two before and two after each shape's kernel runs";
  j["ceiling.rounds"] = c.rounds;
  j["ceiling.load_average"] = c.load_average;
  j["ceiling.cpu"] = c.cpu;
  j["ceiling.core_scaling"] = c.core_scaling();
  j["ceiling.cores_shared"] = cores_shared(c);
  put_ceiling(j, "dram_read_1thread", "gbs", c.read_1t);
  put_ceiling(j, "dram_read", "gbs", c.read_all);
  put_ceiling(j, "dram_read_write", "gbs", c.read_write_all);
  put_ceiling(j, "fp32_fma_1thread", "gflops", c.fp32_fma_1t);
  put_ceiling(j, "fp32_fma", "gflops", c.fp32_fma);
  put_ceiling(j, "bf16_dot", "gflops", c.bf16_dot);
  put_ceiling(j, "amx_bf16", "gflops", c.amx_bf16);
  j["ceiling.matmul_peak_gflops"] = c.matmul_peak();
  j["ceiling.matmul_peak.p90"] = c.matmul_peak_p90();
  for (const BenchRow& row : r.rows) {
    const std::string& n = row.name;
    j[n + ".ms"] = row.ms;
    j[n + ".pool"] = c.pool.label();
    j[n + ".instances"] = row.instances;
    j[n + ".variant"] = row.variant;
    if (row.kind == "decode") {
      j[n + ".kv_gbs"] = row.figure;
      j[n + ".adjacent_dram_gbs"] = row.adjacent_ceiling;
      j[n + ".fraction_of_dram"] = row.fraction;
      j[n + ".fraction_of_dram_p90"] = row.fraction_p90;
    } else {
      j[n + ".gflops"] = row.figure;
      j[n + ".adjacent_matmul_peak_gflops"] = row.adjacent_ceiling;
      j[n + ".fraction_of_matmul_peak"] = row.fraction;
      j[n + ".fraction_of_matmul_peak_p90"] = row.fraction_p90;
    }
    if (row.vs_reference) j[n + ".speedup_vs_reference"] = *row.vs_reference;
  }
  for (const auto& [key, ratio] : quantized_vs_bf16(r.rows)) j[key] = ratio;
  for (const FigureSet& s : r.sets)
    for (const NamedFigure& f : s.figures) j[f.key] = f.value;
  return j;
}

void print_bench_table(const BenchResults& r) {
  const BenchCeilings& c = r.ceilings;
  const char* mem = c.pool.dram ? "DRAM" : "cache";
  std::printf("LLC %.0f MiB (L%d, %d instance%s, %s); pool %.0f MiB", c.llc.bytes / kMiB, c.llc.level, c.llc.instances,
              c.llc.instances == 1 ? "" : "s", c.llc.source.c_str(), c.pool.bytes / kMiB);
  if (c.pool.dram)  // the pool rule, attn_bench::dram_pool_min
    std::printf(" (>= 4x LLC): bandwidth figures are DRAM figures\n");
  else
    std::printf(" (< 4x LLC): bandwidth figures are CACHE figures, not DRAM\n");
  std::printf("cpu: %s\n", c.cpu.c_str());
  std::printf("ceilings (%d threads; p50 / p90 of every run of %s: %d at the start of each, two before and two after "
              "each shape):\n",
              c.threads, rounds_text(c.rounds).c_str(), c.reps);
  // Other processes on the cores lower every figure, the ceilings included.
  if (c.load_average > c.threads)
    std::printf("  (load average %.1f on %d threads: other work shared the cores, figures are noisy)\n", c.load_average,
                c.threads);
  if (cores_shared(c))
    std::printf("  WARNING: %d-thread FMA is %.0f%% of %d x the one-thread FMA: the cores were shared (another process, "
                "even at idle priority in another session, or vCPUs that share a core); stop other work and rerun\n",
                c.threads, 100 * c.core_scaling(), c.threads);
  auto line = [](const std::string& what, const attn_bench::Ceiling& x, const char* unit) {
    if (x.value > 0)
      std::printf("  %-30s %9.1f %9.1f %-8s %s\n", what.c_str(), x.value, x.p90, unit, x.instruction.c_str());
    else
      std::printf("  %-30s %9s %9s %-8s %s\n", what.c_str(), "-", "-", "", x.instruction.c_str());
  };
  std::printf("  %-30s %9s %9s\n", "", "p50", "p90");
  line(std::string(mem) + " read, 1 thread", c.read_1t, "GB/s");
  line(std::string(mem) + " read, " + std::to_string(c.threads) + " threads", c.read_all, "GB/s");
  line(std::string(mem) + " read+write, " + std::to_string(c.threads) + " threads", c.read_write_all, "GB/s");
  line("fp32 FMA, 1 thread", c.fp32_fma_1t, "GFLOP/s");
  line("fp32 FMA", c.fp32_fma, "GFLOP/s");
  line("bf16 dot", c.bf16_dot, "GFLOP/s");
  line("AMX bf16", c.amx_bf16, "GFLOP/s");
  if (!r.rows.empty())
    std::printf("%-36s %-10s %9s %14s %9s %9s %9s\n", "shape", "variant", "ms", "figure", "of adj.", "of p90", "vs ref");
  for (const BenchRow& row : r.rows) {
    char fig[32], ref[16] = "-";
    std::snprintf(fig, sizeof fig, row.kind == "decode" ? "%.1f GB/s" : "%.0f GFLOP/s", row.figure);
    if (row.vs_reference) std::snprintf(ref, sizeof ref, "%.1fx", *row.vs_reference);
    std::printf("%-36s %-10s %9.3f %14s %8.0f%% %8.0f%% %9s\n", row.name.c_str(), row.variant.c_str(), row.ms, fig,
                100 * row.fraction, 100 * row.fraction_p90, ref);
  }
  if (!r.rows.empty())
    std::printf("(of adj.: decode vs the %s reads on %d threads sampled just before and after the shape, prefill vs "
                "max(fp32 FMA, bf16 dot) sampled there (AMX bf16 for the amx variant); of p90: vs the whole run's 90th percentile of that ceiling)\n",
                mem, c.threads);
  const auto ratios = quantized_vs_bf16(r.rows);
  if (!ratios.empty())
    std::printf("(time vs the bf16 cache: the median over this cache's calls of each call's time / the time of a bf16-cache call "
                "alternating with it on the same shape)\n");
  for (const auto& [key, ratio] : ratios) std::printf("time vs the bf16 cache, %s: %.2f\n", key.c_str(), ratio);
  for (const FigureSet& s : r.sets) {
    std::printf("\n%s (%s):\n", s.name.c_str(), s.title.c_str());
    for (const NamedFigure& f : s.figures)
      std::printf("  %-44s %12.4g %-8s %s\n", f.key.c_str(), f.value, f.unit.c_str(), f.note.c_str());
  }
}

}  // namespace attn_cli
