#pragma once
/// Benchmark figures of the mixer backends (mamba1, mamba2, short_conv, linear, gdn) for
/// `attn bench` (attn_testkit: not part of libattn's API).
#include <string>
#include <utility>
#include <vector>

namespace attn::testkit {

/// Named benchmark figures: decode state bytes read + written ÷ time (GB/s, and as a fraction
/// of `dram_rw_gbps`, the in-place read + write ceiling, when > 0), and the chunked prefill's speed-up over the sequential recurrence.
std::vector<std::pair<std::string, double>> mixer_bench_figures(bool quick, double dram_rw_gbps = 0.0);

}  // namespace attn::testkit
