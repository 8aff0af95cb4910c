#pragma once
// The cpu_blocksparse tests' layer: Phi-3-small's pattern (8-token sparse blocks, 2 local blocks,
// every 3rd block vertical) over 8 query heads of size 64, and a ragged batch.
#include <cstdint>

#include "attn/attn.hpp"
#include "support/test_support.hpp"

namespace attn::test {

inline CaseSpec blocksparse_case(DType dtype, KVCacheDType kv, uint64_t seed, int num_kv_heads = 2) {
  CaseSpec s;
  LayerConfig& c = s.config;
  c.num_heads = 8;
  c.num_kv_heads = num_kv_heads;
  c.head_size = 64;
  c.dtype = dtype;
  c.kv_cache_dtype = kv;
  c.use_block_sparse = true;
  c.bs_block_size = 8;
  c.bs_local_blocks = 2;
  c.bs_vert_stride = 3;
  s.block_size = 16;
  s.seed = seed;
  // long prefill, chunked prefill crossing sparse blocks, decodes, odd lengths
  s.seqs = {{0, 77}, {41, 19}, {130, 1}, {5, 1}};
  return s;
}

}  // namespace attn::test
