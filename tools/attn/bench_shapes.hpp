#pragma once
// The attention shapes `attn bench` times.
#include <vector>

#include "bench_kit.hpp"

namespace attn_cli {

/// Llama-3.1-8B decode (batch 1 / 8, context 4096 / 16384, bf16 and fp8 caches) and causal
/// prefill; gpt-oss-20b sliding-window decode and prefill; and, in the full run only, a decode
/// grid over head sizes 64 / 128 / 256 at GQA 4 and 8 (8 KV heads, batch 8, context 4096).
std::vector<attn_bench::Shape> bench_shapes(bool quick);

inline bool is_decode(const attn_bench::Shape& s) { return s.query_len == 1; }

}  // namespace attn_cli
