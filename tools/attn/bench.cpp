// `attn bench`: cpu_flash on the shapes, as fractions of this machine's own measured
// ceilings (DRAM read bandwidth, bf16 dot peak) and as speed-ups over `reference`; then the
// MLA / sparse and mixer figure sets against the DRAM bandwidth measured in the same run.
#include "bench.hpp"

#include <omp.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench_kit.hpp"
#include "bench_sets.hpp"

namespace attn_cli {
namespace {

using attn::KVCacheDType;
using attn_bench::Shape;

constexpr std::size_t kMiB = std::size_t(1) << 20;

struct Row {
  std::string name, kind, variant;
  double ms = 0, figure = 0, fraction = 0;  // decode: GB/s, of DRAM; prefill: GFLOP/s, of bf16 peak
  std::optional<double> vs_reference;
  std::string reference_note;
};

std::vector<Shape> shapes(bool quick) {
  std::vector<Shape> out;
  const int batches[] = {1, 8};
  const int contexts[] = {4096, 16384};
  for (int b : batches)
    for (int ctx : contexts)
      for (KVCacheDType kv : {KVCacheDType::auto_, KVCacheDType::fp8_e4m3}) {
        if (quick && (b != 1 || ctx != 4096)) continue;
        Shape s;
        s.name = "llama8b_decode_b" + std::to_string(b) + "_ctx" + std::to_string(ctx) + (kv == KVCacheDType::auto_ ? "_bf16" : "_fp8");
        s.batch = b, s.context = ctx, s.kv = kv;
        out.push_back(s);
      }
  Shape p;
  p.query_len = quick ? 512 : 2048, p.context = 0;
  p.name = "llama8b_prefill_" + std::to_string(p.query_len) + "_bf16";
  out.push_back(p);
  Shape g;  // gpt-oss-20b: 64 q heads, 8 KV heads, head size 64, sinks, window 128
  g.heads = 64, g.kv_heads = 8, g.head_size = 64, g.window = 128, g.sinks = true;
  g.batch = quick ? 1 : 8, g.context = 4096;
  g.name = "gptoss20b_swa_decode_b" + std::to_string(g.batch) + "_ctx4096_bf16";
  out.push_back(g);
  g.batch = 1, g.context = 0, g.query_len = quick ? 512 : 2048;
  g.name = "gptoss20b_swa_prefill_" + std::to_string(g.query_len) + "_bf16";
  out.push_back(g);
  return out;
}

bool is_decode(const Shape& s) { return s.query_len == 1; }

}  // namespace

int run_bench(const BenchOptions& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);  // the mixer figures run on the default team
  const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();
  const int reps = o.quick ? 3 : 9;
  const std::size_t pool = (o.quick ? 256 : 1024) * kMiB;  // ≫ last-level cache for the full run
  auto log = [&](const std::string& s) {
    if (!o.json) std::cerr << s << std::flush;
  };

  log("measuring ceilings...\n");
  const double dram = attn_bench::dram_read_gbs(threads, pool, o.quick ? 3 : 7);
  const double fp32 = attn_bench::fp32_fma_gflops(threads);
  const double bf16 = attn_bench::bf16_dot_gflops(threads);
  const double compute_peak = bf16 > 0 ? bf16 : fp32;

  std::vector<Row> rows;
  std::map<std::string, double> bf16_decode_ms;
  for (const Shape& s : shapes(o.quick)) {
    if (!o.filter.empty() && s.name.find(o.filter) == std::string::npos) continue;
    log("  " + s.name + " ...");
    Row r;
    r.name = s.name;
    r.kind = is_decode(s) ? "decode" : "prefill";
    double flash_s = 0;
    {
      attn_bench::Workload w(s, "cpu_flash", threads, pool);
      flash_s = w.median_seconds(reps);
      r.variant = w.variant();
      r.ms = flash_s * 1e3;
      if (is_decode(s)) {
        r.figure = w.kv_bytes() / flash_s / 1e9;
        r.fraction = r.figure / dram;
      } else {
        r.figure = w.useful_flops() / flash_s / 1e9;
        r.fraction = compute_peak > 0 ? r.figure / compute_peak : 0;
      }
    }
    // The reference is plain loops: one call on the same shape when it is affordable.
    const bool affordable = (is_decode(s) && double(s.batch) * s.context <= (o.quick ? 4096 : 16384)) ||
                            (!is_decode(s) && s.query_len <= 512) || (s.window > 0 && is_decode(s));
    if (affordable) {
      attn_bench::Workload ref(s, "reference", threads, 0);
      ref.run_once();
      r.vs_reference = ref.run_once() / flash_s;
      r.reference_note = "1 call";
    } else {
      r.reference_note = "skipped (too slow)";
    }
    log(" " + std::to_string(r.ms) + " ms\n");
    rows.push_back(r);
  }

  const std::vector<FigureSet> sets =
      run_figure_sets(o.filter, o.quick, dram, threads, [&](const std::string& name) { log("  " + name + " figures ...\n"); });

  nlohmann::ordered_json j;
  j["threads"] = threads;
  j["ceiling.dram_read_gbs"] = dram;
  j["ceiling.fp32_fma_gflops"] = fp32;
  j["ceiling.bf16_dot_gflops"] = bf16;
  for (const Row& r : rows) {
    j[r.name + ".ms"] = r.ms;
    j[r.name + (r.kind == "decode" ? ".kv_gbs" : ".gflops")] = r.figure;
    j[r.name + (r.kind == "decode" ? ".fraction_of_dram" : ".fraction_of_bf16_peak")] = r.fraction;
    if (r.vs_reference) j[r.name + ".speedup_vs_reference"] = *r.vs_reference;
  }
  for (const Row& r : rows) {
    const auto at = r.name.rfind("_fp8");
    if (at == std::string::npos) continue;
    for (const Row& b : rows)
      if (b.name == r.name.substr(0, at) + "_bf16") j[r.name.substr(0, at) + ".fp8_speedup_over_bf16"] = b.ms / r.ms;
  }

  for (const FigureSet& s : sets)
    for (const NamedFigure& f : s.figures) j[f.key] = f.value;

  if (o.json) {
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf("ceilings (%d threads): DRAM read %.1f GB/s, fp32 FMA %.0f GFLOP/s, bf16 dot %.0f GFLOP/s\n", threads, dram,
                fp32, bf16);
    if (!rows.empty())
      std::printf("%-38s %-12s %10s %12s %10s %12s\n", "shape", "variant", "ms", "figure", "of ceiling", "vs reference");
    for (const Row& r : rows) {
      char fig[32], ref[32];
      std::snprintf(fig, sizeof fig, r.kind == "decode" ? "%.1f GB/s" : "%.0f GFLOP/s", r.figure);
      if (r.vs_reference)
        std::snprintf(ref, sizeof ref, "%.1fx", *r.vs_reference);
      else
        std::snprintf(ref, sizeof ref, "-");
      std::printf("%-38s %-12s %10.3f %12s %9.0f%% %12s\n", r.name.c_str(), r.variant.c_str(), r.ms, fig, 100 * r.fraction, ref);
    }
    for (auto it = j.begin(); it != j.end(); ++it)
      if (it.key().find("fp8_speedup") != std::string::npos)
        std::printf("%s: %.2fx\n", it.key().c_str(), it.value().get<double>());
    for (const FigureSet& s : sets) {
      std::printf("\n%s (%s):\n", s.name.c_str(), s.title.c_str());
      for (const NamedFigure& f : s.figures)
        std::printf("  %-44s %12.4g %-8s %s\n", f.key.c_str(), f.value, f.unit.c_str(), f.note.c_str());
    }
  }
  if (!o.csv_path.empty()) {
    std::ofstream csv(o.csv_path);
    csv << "name,value\n";
    for (auto it = j.begin(); it != j.end(); ++it) csv << it.key() << "," << it.value().dump() << "\n";
  }
  return 0;
}

}  // namespace attn_cli
