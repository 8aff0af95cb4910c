#pragma once
/// What the per-ISA kernels receive: one work item (a query tile of one sequence against one KV
/// head and a KV range) plus the step's arguments, already validated at the API boundary.
#include <cstdint>
#include <vector>

#include "attn/kv_cache.hpp"
#include "attn/types.hpp"
#include "kernels/simd/kv_type.hpp"

namespace attn::cpu_flash {

KvType kv_type_of(DType d);  // throws for storage types cpu_flash does not read

struct KernelArgs {
  // q: [num_tokens, num_heads, head_size], element strides; innermost contiguous.
  const void* q = nullptr;
  DType q_dtype = DType::float32;
  int64_t q_tok_stride = 0, q_head_stride = 0;
  // out: [num_tokens, num_heads, head_size_v]; same conventions.
  void* out = nullptr;
  DType out_dtype = DType::float32;
  int64_t o_tok_stride = 0, o_head_stride = 0;

  PagedKV kv;                       // elements at kv_element_offset (rows contiguous except HND_PAIRS)
  KvType kv_type = KvType::bf16;
  int64_t kv_elem_bytes = 2;
  bool token_scales = false;        // a per-token-head cache: kv.k_token_scales / v_token_scales
  bool int4 = false;                // int4_per_token_head: packed codes of rotated vectors (int4_head)
  bool turboquant = false;          // turboquant_*: slots unpacked to fp32 rows (kv.tq the preset)

  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1]
  const int32_t* seq_lens = nullptr;         // [num_seqs]
  const int32_t* block_table = nullptr;      // [num_seqs, max_blocks_per_seq]
  int32_t max_blocks_per_seq = 0;

  int num_heads = 0, num_kv_heads = 0, group = 1, head_size = 0, head_size_v = 0;
  float scale = 1.0f;               // softmax scale
  float soft_cap = 0.0f;            // 0 = none
  int window = 0;                   // 0 = none; keys with pos > q_pos - window are kept
  bool causal = true;
  const float* alibi_slopes = nullptr;  // [num_heads] or null
  const float* sinks = nullptr;         // [num_heads] or null
  const int32_t* mm_ranges = nullptr;   // [num_seqs][2] multimodal prefix ranges (use_mm_prefix), or null
};

/// One unit of parallel work. Rows are (query token, q head of the group), token-major.
struct WorkItem {
  int32_t seq = 0, kv_head = 0;
  int32_t q_begin = 0, q_end = 0;   // query tokens [q_begin, q_end) of the sequence (0 = its first new token)
  int32_t kv_begin = 0, kv_end = 0; // key positions this item covers
  int64_t partial = -1;             // float offset of this item's partial state; -1 = write `out` directly
  int64_t cost = 0;                 // rows x keys, for ordering
  bool mm = false;                  // has rows inside a multimodal prefix: general kernel only
};

/// Rows of a work item and the float size of its partial state (o[rows][dv], m[rows], l[rows]).
inline int item_rows(const WorkItem& it, int group) { return (it.q_end - it.q_begin) * group; }
inline int64_t partial_floats(int rows, int head_size_v) { return int64_t(rows) * (head_size_v + 2); }

/// Runs one work item. Split items leave unnormalized (o, m, l) at partials + item.partial.
using ItemFn = void (*)(const KernelArgs& args, const WorkItem& item, float* partials);

/// Per-thread scratch of the general item kernel, one for every ISA build (a thread runs one item
/// at a time): grown on demand and reused across items and calls.
struct ItemScratch {
  std::vector<float> qf, s, o, state;
  std::vector<uint16_t> qb;
  std::vector<int16_t> qi, wi;  // integer dot products: q rows, a chunk's P·V weights
  std::vector<float> iscale;    // ... and their per-row scales (q, then the weights)
  std::vector<int> span;  // per row: first and one-past-last visible key of the chunk
  std::vector<char> kv_rows;  // HND_PAIRS: the chunk's K and V rows gathered contiguous
};
inline ItemScratch& item_scratch() {
  thread_local ItemScratch sc;
  return sc;
}
/// Grows the calling thread's item scratch to what an item of up to `rows` rows needs, so a run
/// whose threads each call this before their items allocates nothing in them (kernel_generic.cpp).
void reserve_item_scratch(int rows, int head_size, int head_size_v);

/// Kernels of one ISA, indexed by KvType.
struct KernelTable {
  ItemFn by_kv[kNumKvTypes] = {};
};

const KernelTable& kernels_generic();
#if defined(__x86_64__) || defined(_M_X64)
const KernelTable& kernels_avx2();
const KernelTable& kernels_avx512();
/// Q·Kᵀ on vdpbf16ps: exact only when q is bf16, so used for bf16 q with a bf16 cache.
const KernelTable& kernels_avx512_bf16();
#endif

/// What an output row is multiplied by: the sink, 1/l (0 for a fully masked row) and the V scale.
float row_factor(const KernelArgs& a, int head, float m, float l);
/// Normalizes one output row (sink, 1/l, V scale) and stores it converted to the out dtype.
void store_row(const KernelArgs& a, int64_t token, int head, const float* o, float m, float l);

}  // namespace attn::cpu_flash
