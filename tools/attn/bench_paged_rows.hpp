#pragma once
// The walk over one paged work item's rows, shared by every ISA's paged_sum so they read the
// same bytes in the same order: per block, the K and V rows of the item's keys. No software
// prefetch: on the 2-core Zen 4 development machine a next-block prefetch made this read
// ~20% slower (CPU-time, 1 thread: 11.5 vs 13.8 GB/s), the hardware prefetchers do better.
#include <algorithm>

#include "bench_simd.hpp"

namespace attn_bench {

template <class Row>
inline void walk_paged_rows(const PagedRows& r, Row&& row) {
  for (int32_t key = r.begin; key < r.end;) {
    const int32_t b = key / r.block_size, t1 = std::min<int32_t>(r.end, (b + 1) * r.block_size);
    const std::byte* block = r.base + r.blocks[b] * r.block_stride + r.head_offset;
    for (int32_t t = key - b * r.block_size; t < t1 - b * r.block_size; ++t) {
      const std::byte* k = block + t * r.token_stride;
      row(k, k + r.v_offset);
    }
    key = t1;
  }
}

}  // namespace attn_bench
