#pragma once
// Writing new K/V rows into a paged cache: the one store routine behind KVCache::write (write_kv,
// run with new K/V, attn run, Python). Private to the library.
#include <cstdint>

#include "attn/kv_cache.hpp"

namespace attn::kv {

/// Rows of one KV head for a run of consecutive tokens: row i starts at data + i * stride bytes.
struct RowSource {
  const char* data = nullptr;
  int64_t stride = 0;  // bytes between consecutive tokens' rows
  DType dtype = DType::float32;
};

/// Stores `count` rows (K or V, `n` values each) of KV head `head` into slots offset .. offset +
/// count - 1 of block `block`, converting to the cache's storage dtype (fp8: dividing by the scale,
/// `inv_scale` = 1 / scale). The slots must lie in one block. Returns how many values fp8 storage
/// could not hold (non-finite, or beyond ±max after scaling; stored clamped / NaN). `stream`: a
/// bulk write, whose whole 64-byte lines may bypass the caches (non-temporal stores, fenced).
using StoreRunFn = int64_t (*)(const PagedKV& cache, const RowSource& rows, int64_t block, int32_t offset, int32_t count,
                               int32_t head, bool is_v, int32_t n, float inv_scale, bool stream);

/// Portable build and the AVX-512 build (whole 64-byte lines, pair interleaving in registers).
int64_t store_run_generic(const PagedKV&, const RowSource&, int64_t, int32_t, int32_t, int32_t, bool, int32_t, float, bool);
int64_t store_run_avx512(const PagedKV&, const RowSource&, int64_t, int32_t, int32_t, int32_t, bool, int32_t, float, bool);

/// The build this CPU runs best (ATTN_CPU_ISA honoured), chosen once.
StoreRunFn store_run();

}  // namespace attn::kv
