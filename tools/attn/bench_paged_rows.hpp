#pragma once
// The walk over one paged work item's rows, shared by every ISA's paged_sum so they read the
// same bytes in the same order: per block, the K and V rows of the item's keys, after asking
// for the next block's rows (a kernel that prefetches ahead is what this read stands for).
#include "bench_simd.hpp"

namespace attn_bench {

template <class Row, class Prefetch>
inline void walk_paged_rows(const PagedRows& r, Row&& row, Prefetch&& prefetch) {
  for (int32_t key = r.begin; key < r.end;) {
    const int32_t b = key / r.block_size, t1 = std::min<int32_t>(r.end, (b + 1) * r.block_size);
    const int32_t next_end = std::min<int32_t>(r.end, t1 + r.block_size);
    if (t1 < next_end) {
      const std::byte* nb = r.base + r.blocks[b + 1] * r.block_stride + r.head_offset;
      for (int32_t t = 0; t < next_end - t1; ++t) {
        prefetch(nb + t * r.token_stride, r.k_bytes);
        prefetch(nb + t * r.token_stride + r.v_offset, r.v_bytes);
      }
    }
    const std::byte* block = r.base + r.blocks[b] * r.block_stride + r.head_offset;
    for (int32_t t = key - b * r.block_size; t < t1 - b * r.block_size; ++t) {
      const std::byte* k = block + t * r.token_stride;
      row(k, k + r.v_offset);
    }
    key = t1;
  }
}

}  // namespace attn_bench
