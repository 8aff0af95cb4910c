#pragma once
// What the CPU dense-attention backends that read every cache format declare alike; each backend
// adds its head sizes, its own flags and the why of its batch invariance.
#include "attn/capabilities.hpp"

namespace attn {

inline Capabilities cpu_dense_every_format_caps() {
  Capabilities c;
  c.platforms = {PlatformKind::cpu};
  c.dtypes = {DType::float32, DType::float16, DType::bfloat16};
  c.kv_cache_dtypes = per_element_kv_cache_dtypes();
  for (KVCacheDType k : packed_kv_cache_dtypes()) c.kv_cache_dtypes.push_back(k);
  c.block_sizes = SizeRule::any();
  c.sinks = c.sliding_window = c.soft_cap = c.alibi = c.non_causal = c.mm_prefix = true;
  c.per_head_quant_scales = true;
  return c;
}

}  // namespace attn
