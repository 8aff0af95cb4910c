#pragma once
/// The plain structs the host code hands to the kernels. No attn headers here: the .cu files
/// are compiled by nvcc and stay independent of the core's C++20 headers.
#include <cstdint>

namespace attn::cuda_flash {

enum class ElemKind : int { f16 = 0, bf16 = 1, fp8_e4m3 = 2, f32 = 3 };

/// One attention launch over the paged cache. Device pointers unless stated.
struct AttnParams {
  // q: [num_tokens, num_heads, head_size], element strides, last dim contiguous.
  const void* q = nullptr;
  int64_t q_stride_t = 0, q_stride_h = 0;
  // Paged K/V (same element-stride convention as attn::PagedKV): K(b,t,h,d) =
  // kv[b*block_stride + t*token_stride + h*head_stride + d], V = K + v_offset.
  const void* kv = nullptr;
  int64_t block_stride = 0, token_stride = 0, head_stride = 0, v_offset = 0;
  int block_size = 0;
  const float* k_scales = nullptr;  // [num_kv_heads]
  const float* v_scales = nullptr;  // [num_kv_heads]
  // Batch metadata (vLLM v1): query_start_loc [B+1], seq_lens [B], block_table [B, max_blocks].
  const int32_t* query_start_loc = nullptr;
  const int32_t* seq_lens = nullptr;
  const int32_t* block_table = nullptr;
  int max_blocks_per_seq = 0;
  const int32_t* seq_list = nullptr;  // the sequences this launch serves (grid.z indexes it)
  int num_listed = 0;
  // Shape and numerics.
  int num_heads = 0, num_kv_heads = 0, head_size = 0;
  int group = 1;                     // num_heads / num_kv_heads
  int heads_per_cta = 1;             // <= kMaxHeadsPerCta; grid.y = num_kv_heads * ceil(group / heads_per_cta)
  float scale = 1.0f;                // softmax scale (natural-log units)
  float soft_cap = 0.0f;             // 0 = none
  int window = 0;                    // 0 = none
  bool causal = true;
  // Split-KV partial results: o_partial [max_splits, num_tokens, num_heads, head_size] (already
  // divided by the split's softmax sum), lse_partial [max_splits, num_tokens, num_heads] (log2).
  float* o_partial = nullptr;
  float* lse_partial = nullptr;
  int num_tokens = 0;
  int num_splits = 1;                // splits this launch writes, each split_tokens keys wide
  int split_tokens = 0;
};

/// The deterministic merge of split partials into the output.
struct MergeParams {
  const float* o_partial = nullptr;
  const float* lse_partial = nullptr;
  const int32_t* token_seq = nullptr;   // [num_tokens] sequence of each query token
  const int32_t* seq_splits = nullptr;  // [B] splits written for each sequence
  const float* sinks = nullptr;         // [num_heads] or null
  const float* v_scales = nullptr;      // [num_kv_heads]
  void* out = nullptr;                  // [num_tokens, num_heads, head_size]
  int64_t out_stride_t = 0, out_stride_h = 0;
  int num_tokens = 0, num_heads = 0, group = 1, head_size = 0;
};

/// write_kv on the device: new k/v rows into their slots, quantizing for fp8 caches.
struct WriteKVParams {
  const void* k = nullptr;  // [num_tokens, num_kv_heads, head_size]
  const void* v = nullptr;
  int64_t k_stride_t = 0, k_stride_h = 0, v_stride_t = 0, v_stride_h = 0;
  ElemKind src_kind = ElemKind::bf16;
  const int64_t* slot_mapping = nullptr;  // [num_tokens], -1 = skip
  void* kv = nullptr;
  int64_t block_stride = 0, token_stride = 0, head_stride = 0, v_offset = 0;
  int block_size = 0;
  const float* k_scales = nullptr;  // [num_kv_heads], fp8 caches only
  const float* v_scales = nullptr;
  int num_tokens = 0, num_kv_heads = 0, head_size = 0;
};

// Launchers (kernels/*.cu). `stream` is a cudaStream_t; they return a cudaError_t as int so this
// header needs no CUDA include.
int launch_decode(const AttnParams& p, ElemKind q_kind, ElemKind kv_kind, void* stream);
int launch_prefill(const AttnParams& p, ElemKind q_kind, ElemKind kv_kind, int max_query_rows, void* stream);
int launch_merge(const MergeParams& p, ElemKind out_kind, void* stream);
int launch_write_kv(const WriteKVParams& p, ElemKind cache_kind, void* stream);

// Tile sizes the host planner needs.
inline constexpr int kDecodeTileTokens = 32;
inline constexpr int kPrefillTileRows = 64;

}  // namespace attn::cuda_flash
