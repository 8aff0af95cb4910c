// The one generic capability checker: Capabilities × LayerConfig × Platform → Reasons, in the
// fixed order documented in capabilities.hpp. It names no backend.
#include <algorithm>
#include <sstream>

#include "attn/capabilities.hpp"

namespace attn {
namespace {

template <typename T>
bool contains(const std::vector<T>& v, const T& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

template <typename T>
std::string names(const std::vector<T>& v) {
  std::vector<std::string> out;
  for (const T& x : v) out.emplace_back(to_string(x));
  return join(out);
}

std::string ints(const std::vector<int>& v) {
  std::vector<std::string> out;
  for (int x : v) out.push_back(std::to_string(x));
  return join(out);
}

std::string names_for_platforms(const std::vector<PlatformKind>& v) {
  std::vector<std::string> out;
  for (PlatformKind k : v) out.push_back(k == PlatformKind::cpu ? "cpu" : "cuda");
  return join(out);
}

std::string b(bool x) { return x ? "true" : "false"; }

std::string num(float x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

struct Collector {
  std::vector<Reason> reasons;
  void add_if(bool failed, std::string field, std::string value, std::string expected) {
    if (failed) reasons.push_back({std::move(field), std::move(value), std::move(expected)});
  }
};

}  // namespace

std::string Reason::to_string() const { return field + "=" + value + ", expected " + expected; }

SizeRule SizeRule::plus(std::vector<int> more) const {
  SizeRule r = *this;
  r.extra.insert(r.extra.end(), more.begin(), more.end());
  return r;
}

bool SizeRule::allows(int x) const {
  if (contains(extra, x)) return true;
  switch (kind) {
    case Kind::any: return x > 0;
    case Kind::one_of: return contains(values, x);
    case Kind::range: return x >= lo && x <= hi && (x - lo) % step == 0;
    case Kind::multiple_of:
      return x > 0 && std::any_of(values.begin(), values.end(), [x](int b) { return b > 0 && x % b == 0; });
  }
  return false;
}

std::string SizeRule::describe() const {
  std::string s;
  switch (kind) {
    case Kind::any: s = "any positive size"; break;
    case Kind::one_of: s = "one of " + ints(values); break;
    case Kind::range: s = std::to_string(lo) + ".." + std::to_string(hi) + (step > 1 ? " in steps of " + std::to_string(step) : ""); break;
    case Kind::multiple_of: s = "a multiple of " + ints(values); break;
  }
  if (!extra.empty()) s += ", or " + ints(extra);
  return s;
}

std::vector<Reason> check_capabilities(const Capabilities& caps, const LayerConfig& c, const Platform& p) {
  Collector r;
  r.add_if(!contains(caps.platforms, p.kind), "platform", p.kind_name(), names_for_platforms(caps.platforms));
  if (c.is_attention_free || caps.attention_free) {
    // An attention-free layer has no attention shape to check; only the flag decides.
    r.add_if(c.is_attention_free != caps.attention_free, "is_attention_free", b(c.is_attention_free),
             caps.attention_free ? "true (serves attention-free layers only)" : "false (needs an attention layer)");
    return r.reasons;
  }
  const int hv = c.effective_head_size_v();
  r.add_if(!caps.head_sizes.allows(c.head_size), "head_size", std::to_string(c.head_size), caps.head_sizes.describe());
  r.add_if(hv != c.head_size && !caps.distinct_head_size_v, "head_size_v", std::to_string(hv),
           "equal to head_size=" + std::to_string(c.head_size));
  r.add_if(!contains(caps.dtypes, c.dtype), "dtype", std::string(to_string(c.dtype)), "one of " + names(caps.dtypes));
  r.add_if(!contains(caps.kv_cache_dtypes, c.kv_cache_dtype), "kv_cache_dtype", std::string(to_string(c.kv_cache_dtype)),
           "one of " + names(caps.kv_cache_dtypes));
  r.add_if(c.block_size != 0 && !caps.block_sizes.allows(c.block_size), "block_size", std::to_string(c.block_size),
           caps.block_sizes.describe());
  r.add_if(c.use_mm_prefix && !caps.mm_prefix, "use_mm_prefix", "true", "false (no partial multimodal full attention)");
  r.add_if(c.use_mla != caps.mla, "use_mla", b(c.use_mla), caps.mla ? "true (MLA layers only)" : "false (no MLA)");
  r.add_if(c.has_sink && !caps.sinks, "has_sink", "true", "false (no attention sinks)");
  r.add_if(c.use_sparse != caps.sparse, "use_sparse", b(c.use_sparse),
           caps.sparse ? "true (top-k sparse layers only)" : "false (dense attention only)");
  r.add_if(c.use_block_sparse != caps.block_sparse, "use_block_sparse", b(c.use_block_sparse),
           caps.block_sparse ? "true (block-sparse layers only)" : "false (no block-sparse pattern)");
  r.add_if(c.use_per_head_quant_scales && !caps.per_head_quant_scales, "use_per_head_quant_scales", "true",
           "false (per-tensor scales only)");
  if (p.kind == PlatformKind::cuda) {
    const bool low = caps.min_cc && p.cc < *caps.min_cc;
    const bool high = caps.max_cc && p.cc > *caps.max_cc;
    std::string range = caps.min_cc && caps.max_cc ? caps.min_cc->to_string() + ".." + caps.max_cc->to_string()
                        : caps.min_cc          ? ">= " + caps.min_cc->to_string()
                                               : caps.max_cc ? "<= " + caps.max_cc->to_string() : "any";
    r.add_if(low || high, "compute_capability", p.cc.to_string(), range);
  } else {
    std::vector<CpuFeature> missing;
    for (CpuFeature f : caps.required_cpu_features) if (!p.has(f)) missing.push_back(f);
    r.add_if(!missing.empty(), "cpu_features", "missing " + names(missing), "CPU with " + names(caps.required_cpu_features));
  }
  r.add_if(!contains(caps.attn_types, c.attn_type), "attn_type", std::string(to_string(c.attn_type)),
           "one of " + names(caps.attn_types));
  r.add_if(c.has_sliding_window() && !caps.sliding_window, "sliding_window", std::to_string(c.sliding_window),
           "0 (no sliding window)");
  r.add_if(c.logits_soft_cap > 0 && !caps.soft_cap, "logits_soft_cap", num(c.logits_soft_cap), "0 (no soft-cap)");
  r.add_if(c.use_alibi && !caps.alibi, "use_alibi", "true", "false (no ALiBi)");
  r.add_if(c.use_non_causal && !caps.non_causal, "use_non_causal", "true", "false (causal only)");
  r.add_if(c.use_batch_invariant && !caps.batch_invariance, "use_batch_invariant", "true", "false (not batch invariant)");
  r.add_if(c.use_kv_connector && !caps.kv_connector, "use_kv_connector", "true", "false (no KV connector)");
  return r.reasons;
}

}  // namespace attn
