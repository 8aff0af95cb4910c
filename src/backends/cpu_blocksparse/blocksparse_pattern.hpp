#pragma once
/// The block-sparse attention pattern of Phi-3-small (vLLM's v0 BLOCKSPARSE_FLASH_ATTN backend).
///
/// vLLM defines it in vllm/attention/ops/blocksparse_attention/utils.py
/// (_get_sparse_attn_mask_homo_head / get_sparse_attn_mask) over blocks of `block_size` tokens:
///   query block q may attend key block k  iff  q >= k  and  (q - k < local_blocks  or
///                                                            (k + 1) % vert_stride == 0)
/// i.e. the `local_blocks` most recent blocks (the diagonal one included) plus every
/// vert_stride-th block ("vertical" columns, the block ending each stride), with ordinary
/// token-level causality inside the diagonal block. Its paged decode kernel applies the same rule
/// with q = the block of the decoded token. Phi-3-small's config names the parameters
/// blocksparse_block_size / blocksparse_num_local_blocks / blocksparse_vert_stride.
///
/// Heterogeneous heads (Phi-3-small's blocksparse_homo_head_pattern = false): query head h's
/// vertical columns shift, (kb + h * head_sliding_step + 1) % vert_stride == 0, with vLLM's
/// step max(1, vert_stride / num_heads); step 0 gives every head the same (homo-head) pattern.
#include <cstdint>

namespace attn::blocksparse {

struct Pattern {
  int block_size = 64;    // tokens per sparse block
  int local_blocks = 16;  // most recent blocks always attended (>= 1)
  int vert_stride = 8;    // every vert_stride-th block attended (>= 1)
  int head_sliding_step = 0;  // 0: one pattern for every head

  bool per_head() const { return head_sliding_step != 0; }
  /// Whether query head `head`'s block qb may read key block kb (qb, kb: position / block_size).
  bool allows(int64_t qb, int64_t kb, int64_t head = 0) const {
    return kb <= qb && (qb - kb < local_blocks || (kb + head * head_sliding_step + 1) % vert_stride == 0);
  }
  /// A pattern that keeps every causal block: the dense baseline the benchmark compares with.
  static Pattern dense(int block_size) { return {block_size, 1 << 30, 1, 0}; }
};

}  // namespace attn::blocksparse
