#pragma once
// What a quantized KV cache costs in accuracy: one layer's attention output with each quantized
// cache dtype against the same layer with a bf16 cache, both computed by the reference backend
// (so only the cache's values differ), on two kinds of K / V.
#include <cstdint>
#include <string>
#include <vector>

#include "attn/types.hpp"

namespace attn_cli {

struct KvQualityRow {
  attn::KVCacheDType kv = attn::KVCacheDType::auto_;
  std::string values;     // "uniform" (U(-1, 1)) or "outlier channels" (every 16th dim x20, a few spikes)
  double rel_max_err = 0;  // max |out - out_bf16| / max |out_bf16|
  double rel_rms_err = 0;  // rms(out - out_bf16) / rms(out_bf16)
  double cosine = 0;       // cosine similarity of the two outputs, all elements as one vector
};

/// Llama-3.1-8B-shaped attention (32 q heads, 8 KV heads, head size 128, bf16): a 1024-token
/// cached context, then a decode token and a 16-token chunk. The per-tensor fp8 cache gets
/// calibrated scales (absmax / 448 of the data it stores), as a calibrated engine would use.
std::vector<KvQualityRow> kv_quality(uint64_t seed);

}  // namespace attn_cli
