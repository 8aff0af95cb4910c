#pragma once
// The attention shapes `attn bench` times.
#include <vector>

#include "testkit/bench_kit.hpp"

namespace attn_cli {

/// Llama-3.1-8B decode (batch 1 / 8, context 4096 / 16384; a bf16 cache and each of
/// quantized_kv_dtypes()) and causal
/// prefill; gpt-oss-20b sliding-window decode and prefill; and, in the full run only, a decode
/// grid over head sizes 64 / 128 / 256 at GQA 4 and 8 (8 KV heads, batch 8, context 4096).
std::vector<attn_bench::Shape> bench_shapes(bool quick);

/// The quantized caches set against bf16 (bench shapes, ratios, `attn check`'s quality table):
/// fp8 (e4m3, per-tensor scale), int8_per_token_head, fp8_per_token_head, int4_per_token_head, nvfp4,
/// nvfp4_4over6 and the four turboquant presets.
const std::vector<attn::KVCacheDType>& quantized_kv_dtypes();

/// The shape-name suffix of a cache dtype: _bf16, _fp8 (e4m3, per-tensor scale), or _<name>.
std::string kv_suffix(attn::KVCacheDType kv);

inline bool is_decode(const attn_bench::Shape& s) { return s.query_len == 1; }

}  // namespace attn_cli
