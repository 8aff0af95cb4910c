#pragma once
// Test helper for NaN isolation: writes NaN or Inf into every K and V element a cache holds for
// one position of a sequence (positions past seq_len address the unused slots of its last
// block), in the cache's storage dtype; and the row check those tests share.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "attn/kv_cache.hpp"
#include "attn/metadata.hpp"

namespace attn::test {

inline void store_nonfinite(uint8_t* dst, DType dtype, int n, bool inf) {
  for (int i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::float32: {
        const uint32_t bits = inf ? 0x7f800000u : 0x7fc00000u;
        std::memcpy(dst + 4 * i, &bits, 4);
        break;
      }
      case DType::bfloat16: {
        const uint16_t bits = inf ? 0x7f80 : 0x7fc0;
        std::memcpy(dst + 2 * i, &bits, 2);
        break;
      }
      case DType::float16: {
        const uint16_t bits = inf ? 0x7c00 : 0x7e00;
        std::memcpy(dst + 2 * i, &bits, 2);
        break;
      }
      case DType::fp8_e5m2: dst[i] = inf ? 0x7c : 0x7f; break;
      default: dst[i] = 0x7f; break;  // fp8 e4m3 has no Inf: NaN
    }
  }
}

/// Poisons position `pos` of sequence `s` (every KV head, K and V). MLA caches: the whole entry.
inline void plant_nonfinite(const KVCache& cache, const BatchMetadata& md, int s, int64_t pos, bool inf) {
  const PagedKV kv = cache.view();
  const int64_t block = md.blocks(s)[pos / md.block_size], off = pos % md.block_size;
  const size_t esz = dtype_size(kv.dtype);
  auto* base = static_cast<uint8_t*>(kv.base);
  const bool mla = cache.spec().layout == KVLayout::MLA;
  for (int g = 0; g < (mla ? 1 : kv.num_kv_heads); ++g) {
    const int64_t k = block * kv.block_stride + off * kv.token_stride + g * kv.head_stride;
    store_nonfinite(base + k * esz, kv.dtype, kv.head_size, inf);
    if (!mla) store_nonfinite(base + (k + kv.v_offset) * esz, kv.dtype, kv.head_size_v, inf);
  }
}

/// Poisons the unused slots of sequence s's last block (positions seq_len .. block end).
inline void plant_in_tail_slots(const KVCache& cache, const BatchMetadata& md, int s, bool inf) {
  const int64_t len = md.seq_lens[s];
  for (int64_t p = len; p % md.block_size != 0; ++p) plant_nonfinite(cache, md, s, p, inf);
}

/// Row `t` (of `row` values) of `got` is finite and bit for bit `finite`'s.
inline void expect_rows_equal(const std::vector<double>& got, const std::vector<double>& finite, int t, size_t row,
                              const std::string& what) {
  for (size_t i = t * row; i < (t + 1) * row; ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << " token " << t << " element " << i - t * row;
    ASSERT_EQ(got[i], finite[i]) << what << " token " << t << " element " << i - t * row;
  }
}

}  // namespace attn::test
