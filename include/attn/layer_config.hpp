#pragma once
/// LayerConfig: everything the selector may look at for one layer — the inputs of both seeds
/// (vLLM's AttentionSelectorConfig and v0's which_attn_to_use) plus what real layers need.
/// Hashable and printable: it is the selector's cache key.
#include <cstddef>
#include <cstdint>
#include <string>

#include "attn/types.hpp"

namespace attn {

struct LayerConfig {
  // --- shape ---
  int num_heads = 32;
  int num_kv_heads = 8;
  int head_size = 128;
  int head_size_v = 0;               // 0 = same as head_size
  // --- precision ---
  DType dtype = DType::bfloat16;     // q / out / new k,v
  KVCacheDType kv_cache_dtype = KVCacheDType::auto_;
  int block_size = 0;                // 0 = not set by the user (never filters backends)
  // --- features ---
  AttnType attn_type = AttnType::decoder;
  int sliding_window = 0;            // 0 = none; else keys with pos > q_pos - window
  float logits_soft_cap = 0.0f;      // 0 = none
  bool use_alibi = false;
  bool has_sink = false;
  bool use_mla = false;
  bool use_sparse = false;           // DeepSeek V3.2 top-k index sparse attention
  bool use_mm_prefix = false;
  bool use_per_head_quant_scales = false;
  bool is_attention_free = false;
  // --- block-sparse (v0 is_blocksparse, Phi-3-small) ---
  bool use_block_sparse = false;
  int bs_block_size = 0;             // tokens per sparse block
  int bs_local_blocks = 0;           // local blocks always attended
  int bs_vert_stride = 0;            // every vert_stride-th block attended
  int bs_head_sliding_step = 0;      // 0: one pattern for all heads; else head h's columns shift by h * step
  // --- MLA dims (use_mla); head_size = kv_lora_rank + qk_rope_head_dim ---
  int kv_lora_rank = 0;
  int qk_rope_head_dim = 0;
  int qk_nope_head_dim = 0;
  int v_head_dim = 0;
  int index_topk = 0;                // use_sparse: top-k positions per query token
  // --- engine config ---
  bool use_non_causal = false;
  bool use_batch_invariant = false;
  bool use_kv_connector = false;

  int effective_head_size_v() const { return head_size_v ? head_size_v : head_size; }
  bool has_sliding_window() const { return sliding_window > 0; }
  bool causal() const { return attn_type == AttnType::decoder && !use_non_causal; }
  /// vLLM's KV-cache spec kind: full_attention, sliding_window, mla_attention,
  /// sliding_window_mla, encoder_only_attention, cross_attention.
  std::string kind() const;

  /// Rejects configs no backend could mean (heads not dividing, zero sizes, ...).
  void validate() const;

  bool operator==(const LayerConfig&) const = default;
  std::string to_string() const;     // "LayerConfig(num_heads=32, ..., use_kv_connector=false)"
  std::size_t hash() const;
};

struct LayerConfigHash {
  std::size_t operator()(const LayerConfig& c) const { return c.hash(); }
};

/// Mamba-family mixer types (vLLM MambaAttentionBackendEnum keys).
enum class MambaType : uint8_t { mamba1, mamba2, short_conv, linear_attention, gdn_attention, custom };
std::string_view to_string(MambaType t);
MambaType parse_mamba_type(std::string_view name);  // error lists valid types
const std::vector<MambaType>& all_mamba_types();

}  // namespace attn
