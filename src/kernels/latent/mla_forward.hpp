#pragma once
/// Absorbed-form MLA attention over the latent paged cache (dense or top-k sparse): plans
/// tasks (query-token tiles × key splits), runs the per-ISA attend kernel on them in parallel and
/// merges split partials by log-sum-exp.
#include <string>
#include <vector>

#include "attn/kv_cache.hpp"
#include "attn/metadata.hpp"
#include "attn/tensor.hpp"

namespace attn::mla {

struct MlaShape {
  int num_heads = 0;
  int rank = 0;        // kv_lora_rank: output width, the V part of each entry
  int rope = 0;        // qk_rope_head_dim
  float scale = 1.0f;  // softmax scale
  int num_threads = 0; // 0 → OpenMP default
  int width() const { return rank + rope; }
};

/// q: [num_tokens, num_heads, rank + rope] → out: [num_tokens, num_heads, rank].
/// topk: null for dense attention, else [num_tokens, topk] int32 positions (-1 = padding).
void absorbed_forward(const MlaShape& shape, const TensorView& q, const KVCache& cache, const BatchMetadata& md,
                      const TensorView& out, const TensorView* topk);

/// Checks that `cache` is an MLA cache of this shape and that `md` fits it.
void check_mla_cache(const MlaShape& shape, const KVCache& cache, const BatchMetadata& md);

/// Cache slot of position `pos` of sequence `s` (block table lookup).
inline int64_t slot_of(const BatchMetadata& md, int s, int64_t pos) {
  return int64_t(md.blocks(s)[pos / md.block_size]) * md.block_size + pos % md.block_size;
}

/// q [tokens, heads, width] (any float dtype, inner-contiguous) → fp32 [tokens][heads][width],
/// multiplied by scale · log2(e) for the base-2 kernel.
std::vector<float> scaled_q(const TensorView& q, int heads, int width, float scale, int threads);

/// Reads element i of a q/out row whatever its 16/32-bit dtype; writes likewise.
float read_elem(const void* row, DType dtype, int i);
void write_row(void* row, DType dtype, const float* src, int n, float mul);

}  // namespace attn::mla
