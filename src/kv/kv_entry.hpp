#pragma once
/// What one cache entry (a token's K or V for one head) holds, shared by the cache's files.
#include <algorithm>
#include <cstdint>

#include "attn/kv_cache.hpp"
#include "attn/numeric.hpp"

namespace attn::kv {

inline bool is_ds_mla(const KVCacheSpec& s) { return s.kv_cache_dtype == KVCacheDType::fp8_ds_mla; }

/// Elements per entry (per head): fp8_ds_mla entries are bytes of a fixed layout.
inline int32_t entry_width(const KVCacheSpec& s) {
  if (s.turboquant()) return turboquant::slot_bytes(turboquant::format_of(s.kv_cache_dtype), s.head_size);  // K and V in one slot
  return is_ds_mla(s) ? ds_mla::kEntryBytes : std::max(s.stored_width(false), s.stored_width(true));
}

}  // namespace attn::kv
