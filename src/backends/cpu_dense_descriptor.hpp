#pragma once
// What the CPU dense-attention backends that read every cache format declare alike; each backend
// adds its own flags, attention types, layout and the why of its batch invariance.
#include <string>
#include <utility>

#include "attn/backend.hpp"

namespace attn {

inline BackendDescriptor cpu_dense_every_format_descriptor(std::string name, std::string summary, SizeRule head_sizes) {
  BackendDescriptor d;
  d.name = std::move(name);
  d.summary = std::move(summary);
  Capabilities& c = d.caps;
  c.platforms = {PlatformKind::cpu};
  c.dtypes = {DType::float32, DType::float16, DType::bfloat16};
  c.kv_cache_dtypes = per_element_kv_cache_dtypes();
  for (KVCacheDType k : packed_kv_cache_dtypes()) c.kv_cache_dtypes.push_back(k);
  c.head_sizes = std::move(head_sizes);
  c.block_sizes = SizeRule::any();
  c.sinks = c.sliding_window = c.soft_cap = c.alibi = c.non_causal = c.mm_prefix = true;
  c.per_head_quant_scales = true;
  return d;
}

}  // namespace attn
