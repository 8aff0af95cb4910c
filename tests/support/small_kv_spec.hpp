#pragma once
// The small cache the KVCache tests build on: 4 blocks of 4 slots, 2 KV heads, K width 8, V width 6.
#include "attn/kv_cache.hpp"

namespace attn::test {

inline KVCacheSpec small_kv_spec(DType dtype = DType::float32, KVLayout layout = KVLayout::NHD) {
  return {.num_blocks = 4, .block_size = 4, .num_kv_heads = 2, .head_size = 8, .head_size_v = 6, .dtype = dtype,
          .layout = layout};
}

}  // namespace attn::test
