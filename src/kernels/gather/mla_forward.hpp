#pragma once
/// Absorbed-form MLA attention over the latent paged cache (dense or top-k sparse): plans
/// tasks (query-token tiles × key splits), runs the per-ISA attend kernel on them in parallel and
/// merges split partials by log-sum-exp.
#include <string>
#include <vector>

#include "attn/kv_cache.hpp"
#include "kernels/gather/attend_tiles.hpp"
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

/// The absorbed form's tiles for a step (plan time): dense → one key list per sequence and tiles of
/// query tokens over its prefixes; top-k (`topk` > 0 positions per token) → one tile of num_heads
/// rows per token whose list the run fills from the indices.
TilePlan plan_absorbed(const MlaShape& shape, const BatchMetadata& md, int topk);
/// Workspace bytes of an absorbed run under `plan` with `topk` positions per token (0: dense).
std::size_t absorbed_workspace_bytes(const MlaShape& shape, const TilePlan& plan, int num_tokens, int topk);

/// q: [num_tokens, num_heads, rank + rope] → out: [num_tokens, num_heads, rank], under `plan`
/// (plan_absorbed of the same metadata and topk capacity), with absorbed_workspace_bytes of
/// `workspace`. topk: null for dense attention, else [num_tokens, topk] int32 positions (-1 =
/// padding), at most the planned topk per token.
void absorbed_forward(const MlaShape& shape, const TilePlan& plan, const TensorView& q, const KVCache& cache,
                      const BatchMetadata& md, const TensorView& out, const TensorView* topk, void* workspace);

/// Checks that `cache` is an MLA cache of this shape whose block size is `md`'s (the plan checked
/// md against the cache's geometry).
void check_mla_cache(const MlaShape& shape, const KVCache& cache, const BatchMetadata& md);

/// Cache slot of position `pos` of sequence `s` (block table lookup).
inline int64_t slot_of(const BatchMetadata& md, int s, int64_t pos) {
  return int64_t(md.blocks(s)[pos / md.block_size]) * md.block_size + pos % md.block_size;
}

/// q [tokens, heads, width] (any float dtype, inner-contiguous) → dst fp32 [tokens][heads][width],
/// multiplied by scale · log2(e) for the base-2 kernel.
void scaled_q(const TensorView& q, int heads, int width, float scale, int threads, float* dst);

/// Reads element i of a q/out row whatever its 16/32-bit dtype; writes likewise.
float read_elem(const void* row, DType dtype, int i);
void write_row(void* row, DType dtype, const float* src, int n, float mul);

}  // namespace attn::mla
