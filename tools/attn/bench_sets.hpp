#pragma once
// The figure sets `attn bench` adds to its attention shapes: the MLA / sparse backends'
// (attn::testkit::mla_bench_figures) and the mixers' (attn::testkit::mixer_bench_figures), each measured against
// the DRAM bandwidth of the same run, and the per-step overhead of a 32-layer decode step
// (bench_step.cpp), and write_kv (bench_write_kv.cpp). Keys are "mla.<figure>", "mixer.<figure>",
// "step_<shape>.<figure>" and "write_kv.<shape>.<figure>".
#include <functional>
#include <string>
#include <vector>

namespace attn_cli {

struct NamedFigure {
  std::string key;   // "mixer.decode.mamba1.state_GBps"
  double value = 0;
  std::string unit;  // "ms", "GB/s", "x", "fraction", "us", "tokens/s"
  std::string note;  // the shape it was measured on, when the set says
};

struct FigureSet {
  std::string name;   // "mla", "mixer": the key prefix
  std::string title;  // a line for the text report
  std::vector<NamedFigure> figures;
};

/// The 32-layer decode steps (B=64 ctx 32, B=8 ctx 4096): forward per layer vs plan once + run
/// per layer, time per step and the fraction outside the kernels (bench_step.cpp).
std::vector<NamedFigure> step_overhead_figures(bool quick, int threads);

/// Storing new K/V into cpu_flash's cache: a 2048-token prompt against a memcpy of the same bytes
/// timed interleaved, and one decode token per sequence against the attend it precedes
/// (bench_write_kv.cpp). Keys "write_kv.<shape>.<figure>".
std::vector<NamedFigure> write_kv_figures(bool quick, int threads);

/// The sets `filter` selects ("" = all): a set runs when its name contains the filter or the
/// filter starts with its name; then only figures whose key contains the filter are kept.
/// `progress` is told the name of each set before it runs.
std::vector<FigureSet> run_figure_sets(const std::string& filter, bool quick, double dram_gbps, double dram_rw_gbps, int threads,
                                       const std::function<void(const std::string&)>& progress);

}  // namespace attn_cli
