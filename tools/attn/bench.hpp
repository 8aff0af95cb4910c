#pragma once
/// `attn bench`: cpu_flash on Llama-3.1-8B and gpt-oss-20b shapes, as ratios against the machine's
/// measured ceilings and against `reference`. Implemented in bench.cpp.
#include <string>

namespace attn_cli {

struct BenchOptions {
  bool json = false;          // print {"name": value, ...} figures
  std::string filter;         // substring filter on shape names ("" = all)
  bool quick = false;         // short sizes / few repeats (CI smoke)
  int threads = 0;            // 0 = all cores
  std::string csv_path;       // also write CSV here when set
  std::string kv_layout;      // cache layout of the attention shapes ("" = cpu_flash's cache_spec)
  int rounds = 1;             // ceilings + shapes measured this many times, medians reported
};

/// Runs the benchmark; returns the process exit code.
int run_bench(const BenchOptions& options);

}  // namespace attn_cli
