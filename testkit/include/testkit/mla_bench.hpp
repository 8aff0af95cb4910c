#pragma once
/// Benchmark figures of the MLA / sparse backends, for `attn bench` (attn_testkit: not part of
/// libattn's API):
///   mla_decode.*        cpu_mla decode (16 heads), latent cache bytes read ÷ time vs DRAM bandwidth
///                       and vs the roofline min(DRAM, product peak ÷ (1.89 · heads flop/byte))
///   mla_decode_h128.*   the same with 128 heads (compute-bound on CPUs without AMX)
///   mla_decode_ds_mla.* 16-head decode on fp8_ds_mla entries vs the bf16 latent, interleaved
///   sparse_decode.*     cpu_sparse (top-k) decode vs cpu_mla dense decode at the same context
///   blocksparse_prefill.* cpu_blocksparse prefill vs the same kernel with every block kept
#include <string>
#include <vector>

namespace attn::testkit {

struct BenchFigure {
  std::string name;   // "mla_decode.gbs"
  double value = 0;
  std::string unit;   // "GB/s", "ms", "x", "fraction"
  std::string note;   // the shape it was measured on
};

/// Runs the workloads (bf16, this machine, `threads` = 0 → all cores) and returns the figures.
/// dram_gbps: the measured DRAM read bandwidth the MLA decode figure is compared with.
/// quick: smaller shapes and fewer repetitions (seconds instead of tens of seconds).
std::vector<BenchFigure> mla_bench_figures(bool quick, double dram_gbps, int threads = 0);

}  // namespace attn::testkit
