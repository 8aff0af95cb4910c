#pragma once
// A capability set that serves the default layer and every feature, on cpu and cuda: checker
// tests take one thing away at a time.
#include "attn/capabilities.hpp"

namespace attn::test {

inline Capabilities permissive_caps() {
  Capabilities c;
  c.platforms = {PlatformKind::cpu, PlatformKind::cuda};
  c.dtypes = {DType::float32, DType::float16, DType::bfloat16};
  c.kv_cache_dtypes = all_kv_cache_dtypes();
  c.head_sizes = SizeRule::any();
  c.block_sizes = SizeRule::any();
  c.distinct_head_size_v = true;
  c.sinks = c.sliding_window = c.soft_cap = c.alibi = c.non_causal = true;
  c.batch_invariance = c.kv_connector = c.per_head_quant_scales = c.mm_prefix = true;
  c.attn_types = all_attn_types();
  return c;
}

}  // namespace attn::test
