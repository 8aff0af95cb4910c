#include "bench_sets.hpp"

#include "testkit/mixer_bench.hpp"
#include "testkit/mla_bench.hpp"

namespace attn_cli {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// mixer_bench_figures gives bare numbers; their names carry the unit.
std::string mixer_unit(const std::string& name) {
  if (ends_with(name, ".us_per_step")) return "us";
  if (ends_with(name, "_GBps")) return "GB/s";
  if (ends_with(name, "tokens_per_s")) return "tokens/s";
  if (ends_with(name, "speedup")) return "x";
  if (ends_with(name, "fraction_of_dram_read_write")) return "fraction";
  return "";
}

bool selected(const std::string& set, const std::string& filter) {
  return filter.empty() || set.find(filter) != std::string::npos || filter.rfind(set, 0) == 0;
}

void keep_matching(FigureSet& s, const std::string& filter) {
  if (filter.empty() || s.name.find(filter) != std::string::npos) return;
  std::vector<NamedFigure> kept;
  for (auto& f : s.figures) {
    if (f.key.find(filter) != std::string::npos) kept.push_back(std::move(f));
  }
  s.figures = std::move(kept);
}

}  // namespace

std::vector<FigureSet> run_figure_sets(const std::string& filter, bool quick, double dram_gbps, double dram_rw_gbps, int threads,
                                       const std::function<void(const std::string&)>& progress) {
  std::vector<FigureSet> sets;
  // ATTN_CLI_HAVE_MLA_BENCH: libattn was built with the cpu_mla / cpu_sparse / cpu_blocksparse folders (see
  // tools/attn/CMakeLists.txt); a build skipping them has no MLA figures to report.
#ifdef ATTN_CLI_HAVE_MLA_BENCH
  if (selected("mla", filter)) {
    progress("mla");
    FigureSet s{"mla", "MLA decode vs DRAM, top-k sparse vs dense decode, block-sparse vs dense prefill", {}};
    for (const attn::testkit::BenchFigure& f : attn::testkit::mla_bench_figures(quick, dram_gbps, threads)) {
      s.figures.push_back({"mla." + f.name, f.value, f.unit, f.note});
    }
    keep_matching(s, filter);
    sets.push_back(std::move(s));
  }
#endif
  if (selected("mixer", filter)) {
    progress("mixer");
    FigureSet s{"mixer", "mixers: decode state bytes read + written vs the in-place read + write ceiling, chunked vs sequential prefill", {}};
    for (const auto& [name, value] : attn::testkit::mixer_bench_figures(quick, dram_rw_gbps)) {
      s.figures.push_back({"mixer." + name, value, mixer_unit(name), ""});
    }
    keep_matching(s, filter);
    sets.push_back(std::move(s));
  }
  if (selected("step", filter)) {
    progress("step");
    FigureSet s{"step", "per-step overhead, 32-layer Llama-3.1-8B decode on cpu_flash: forward per layer vs plan once + run", {}};
    s.figures = step_overhead_figures(quick, threads);
    keep_matching(s, filter);
    sets.push_back(std::move(s));
  }
  if (selected("write_kv", filter)) {
    progress("write_kv");
    FigureSet s{"write_kv", "write_kv: new K/V into cpu_flash's cache vs a memcpy of the same bytes, and vs the decode attend", {}};
    s.figures = write_kv_figures(quick, threads);
    keep_matching(s, filter);
    sets.push_back(std::move(s));
  }
  return sets;
}

}  // namespace attn_cli
