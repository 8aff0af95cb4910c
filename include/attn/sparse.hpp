#pragma once
/// Extra per-call inputs of the MLA and sparse backends. The AttentionImpl signature stays the
/// same for every backend; callers that know they hold an MLA or top-k sparse layer reach these
/// interfaces with dynamic_cast:
///
///   if (auto* s = dynamic_cast<attn::TopkSparseAttention*>(impl.get())) s->set_topk_indices(idx);
///   if (auto* m = dynamic_cast<attn::MlaAttention*>(impl.get())) m->forward_expanded(q, cache, md, out);
#include <string>

#include "attn/backend.hpp"
#include "attn/kv_cache.hpp"
#include "attn/metadata.hpp"
#include "attn/tensor.hpp"

namespace attn {

/// Served by layers with use_sparse (DeepSeek V3.2 DSA): each query token attends only to the
/// cache positions its indexer picked.
class TopkSparseAttention {
 public:
  virtual ~TopkSparseAttention() = default;
  /// indices: [num_tokens, topk] int32, row t for query token t of the next forward() call.
  /// Entries are positions within that token's sequence (0 <= i < seq_len); -1 is padding;
  /// positions after the query token's own position are skipped (causal). A listed position
  /// counts once per listing. The view must stay valid until that forward() returns.
  virtual void set_topk_indices(const TensorView& indices) = 0;
};

/// Served by MLA layers (use_mla). forward() is the weight-absorbed form: q [num_tokens,
/// num_heads, kv_lora_rank + qk_rope_head_dim] already projected into latent space, out
/// [num_tokens, num_heads, kv_lora_rank]. The expanded form below up-projects the cached latent
/// per head instead, which needs fewer FLOPs for long prompts.
class MlaAttention {
 public:
  virtual ~MlaAttention() = default;
  /// w_uk: [num_heads, kv_lora_rank, qk_nope_head_dim], w_uv: [num_heads, kv_lora_rank,
  /// v_head_dim]; float32 / float16 / bfloat16, contiguous. Copied.
  virtual void set_up_projections(const TensorView& w_uk, const TensorView& w_uv) = 0;
  /// Expanded form. q: [num_tokens, num_heads, qk_nope_head_dim + qk_rope_head_dim] (the rope
  /// part last) → out: [num_tokens, num_heads, v_head_dim]. K = [c·W_UK[h] | k_pe], V = c·W_UV[h]
  /// for every cached position. Needs set_up_projections first.
  virtual void forward_expanded(const TensorView& q, const KVCache& cache, const BatchMetadata& md,
                                const TensorView& out) = 0;
  /// True when the expanded form needs fewer FLOPs than the absorbed form for this batch
  /// (long prefills); callers pick the form with it and report which one ran.
  virtual bool expanded_pays_off(const BatchMetadata& md) const = 0;
  /// "absorbed" or "expanded": the form the last forward call ran ("" before any call).
  virtual std::string last_form() const = 0;
};

}  // namespace attn
