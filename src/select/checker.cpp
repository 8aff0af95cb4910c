// The one generic capability checker: Capabilities × LayerConfig × Platform → Reasons, in the
// fixed order documented in capabilities.hpp. It names no backend. Its platform checks are the
// mixer checker's too (platform_checks.hpp).
#include <algorithm>
#include <ostream>
#include <sstream>

#include "attn/capabilities.hpp"
#include "core/names.hpp"
#include "select/platform_checks.hpp"

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

std::string b(bool x) { return x ? "true" : "false"; }

std::string num(float x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

struct Collector {
  std::vector<Reason> reasons;
  void add_if(bool failed, ReasonField field, std::string value, std::string expected) {
    if (failed) reasons.push_back({field, std::move(value), std::move(expected)});
  }
  void add(std::optional<Reason> reason) {
    if (reason) reasons.push_back(std::move(*reason));
  }
};

const detail::NameTable<ReasonField>& field_table() {
  using F = ReasonField;
  static const detail::NameTable<F> t = {
      {F::platform, "platform"}, {F::module, "module"}, {F::head_size, "head_size"}, {F::head_size_v, "head_size_v"},
      {F::dtype, "dtype"}, {F::kv_cache_dtype, "kv_cache_dtype"}, {F::block_size, "block_size"},
      {F::use_mm_prefix, "use_mm_prefix"}, {F::use_mla, "use_mla"}, {F::has_sink, "has_sink"},
      {F::use_sparse, "use_sparse"}, {F::use_block_sparse, "use_block_sparse"}, {F::is_attention_free, "is_attention_free"},
      {F::use_per_head_quant_scales, "use_per_head_quant_scales"}, {F::compute_capability, "compute_capability"},
      {F::cpu_features, "cpu_features"}, {F::attn_type, "attn_type"}, {F::sliding_window, "sliding_window"},
      {F::logits_soft_cap, "logits_soft_cap"}, {F::use_alibi, "use_alibi"}, {F::use_non_causal, "use_non_causal"},
      {F::use_batch_invariant, "use_batch_invariant"}, {F::use_kv_connector, "use_kv_connector"},
      {F::mamba_type, "mamba_type"}, {F::other, ""}};
  return t;
}

}  // namespace

std::string_view to_string(ReasonField f) { return detail::name_of(field_table(), f); }

ReasonFieldName::ReasonFieldName(ReasonField f) : id_(f), name_(attn::to_string(f)) {}

ReasonFieldName::ReasonFieldName(std::string name) : name_(std::move(name)) {
  for (auto& [f, n] : field_table())
    if (f != ReasonField::other && n == name_) id_ = f;
}

std::ostream& operator<<(std::ostream& os, const ReasonFieldName& f) { return os << f.name(); }

std::string Reason::to_string() const { return field.name() + "=" + value + ", expected " + expected; }

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

namespace detail {

std::optional<Reason> platform_reason(const std::vector<PlatformKind>& platforms, const Platform& p) {
  if (contains(platforms, p.kind)) return std::nullopt;
  return Reason{ReasonField::platform, p.kind_name(), names(platforms)};
}

std::optional<Reason> machine_reason(const std::vector<CpuFeature>& required, const std::optional<ComputeCapability>& min_cc,
                                     const std::optional<ComputeCapability>& max_cc, const Platform& p) {
  if (p.kind == PlatformKind::cuda) {
    const bool low = min_cc && p.cc < *min_cc;
    const bool high = max_cc && p.cc > *max_cc;
    if (!low && !high) return std::nullopt;
    std::string range = min_cc && max_cc ? min_cc->to_string() + ".." + max_cc->to_string()
                        : min_cc         ? ">= " + min_cc->to_string()
                                         : "<= " + max_cc->to_string();
    return Reason{ReasonField::compute_capability, p.cc.to_string(), range};
  }
  std::vector<CpuFeature> missing;
  for (CpuFeature f : required) if (!p.has(f)) missing.push_back(f);
  if (missing.empty()) return std::nullopt;
  return Reason{ReasonField::cpu_features, "missing " + names(missing), "CPU with " + names(required)};
}

}  // namespace detail

std::vector<Reason> check_capabilities(const Capabilities& caps, const LayerConfig& c, const Platform& p) {
  Collector r;
  r.add(detail::platform_reason(caps.platforms, p));
  if (c.is_attention_free || caps.attention_free) {
    // An attention-free layer has no attention shape to check; only the flag decides.
    r.add_if(c.is_attention_free != caps.attention_free, ReasonField::is_attention_free, b(c.is_attention_free),
             caps.attention_free ? "true (serves attention-free layers only)" : "false (needs an attention layer)");
    return r.reasons;
  }
  const int hv = c.effective_head_size_v();
  r.add_if(!caps.head_sizes.allows(c.head_size), ReasonField::head_size, std::to_string(c.head_size), caps.head_sizes.describe());
  r.add_if(hv != c.head_size && !caps.distinct_head_size_v, ReasonField::head_size_v, std::to_string(hv),
           "equal to head_size=" + std::to_string(c.head_size));
  r.add_if(!contains(caps.dtypes, c.dtype), ReasonField::dtype, std::string(to_string(c.dtype)), "one of " + names(caps.dtypes));
  r.add_if(!contains(caps.kv_cache_dtypes, c.kv_cache_dtype), ReasonField::kv_cache_dtype, std::string(to_string(c.kv_cache_dtype)),
           "one of " + names(caps.kv_cache_dtypes));
  // A format's own shape rules (the ones KVCacheSpec::validate applies), for backends that declare it.
  if (contains(caps.kv_cache_dtypes, c.kv_cache_dtype))
    for (const KvFormatUnmet& u : kv_format_unmet(c.kv_cache_dtype, c.head_size, hv, c.use_per_head_quant_scales)) {
      const ReasonField f = u.argument == "head_size"     ? ReasonField::head_size
                            : u.argument == "head_size_v" ? ReasonField::head_size_v
                                                          : ReasonField::use_per_head_quant_scales;
      r.add_if(true, f, u.value, u.expected);
    }
  r.add_if(c.block_size != 0 && !caps.block_sizes.allows(c.block_size), ReasonField::block_size, std::to_string(c.block_size),
           caps.block_sizes.describe());
  r.add_if(c.use_mm_prefix && !caps.mm_prefix, ReasonField::use_mm_prefix, "true", "false (no partial multimodal full attention)");
  r.add_if(c.use_mla != caps.mla, ReasonField::use_mla, b(c.use_mla), caps.mla ? "true (MLA layers only)" : "false (no MLA)");
  r.add_if(c.has_sink && !caps.sinks, ReasonField::has_sink, "true", "false (no attention sinks)");
  r.add_if(c.use_sparse != caps.sparse, ReasonField::use_sparse, b(c.use_sparse),
           caps.sparse ? "true (top-k sparse layers only)" : "false (dense attention only)");
  r.add_if(c.use_block_sparse != caps.block_sparse, ReasonField::use_block_sparse, b(c.use_block_sparse),
           caps.block_sparse ? "true (block-sparse layers only)" : "false (no block-sparse pattern)");
  r.add_if(c.use_per_head_quant_scales && !caps.per_head_quant_scales, ReasonField::use_per_head_quant_scales, "true",
           "false (per-tensor scales only)");
  r.add(detail::machine_reason(caps.required_cpu_features, caps.min_cc, caps.max_cc, p));
  r.add_if(!contains(caps.attn_types, c.attn_type), ReasonField::attn_type, std::string(to_string(c.attn_type)),
           "one of " + names(caps.attn_types));
  r.add_if(c.has_sliding_window() && !caps.sliding_window, ReasonField::sliding_window, std::to_string(c.sliding_window),
           "0 (no sliding window)");
  r.add_if(c.logits_soft_cap > 0 && !caps.soft_cap, ReasonField::logits_soft_cap, num(c.logits_soft_cap), "0 (no soft-cap)");
  r.add_if(c.use_alibi && !caps.alibi, ReasonField::use_alibi, "true", "false (no ALiBi)");
  r.add_if(c.use_non_causal && !caps.non_causal, ReasonField::use_non_causal, "true", "false (causal only)");
  r.add_if(c.use_batch_invariant && !caps.batch_invariance, ReasonField::use_batch_invariant, "true", "false (not batch invariant)");
  r.add_if(c.use_kv_connector && !caps.kv_connector, ReasonField::use_kv_connector, "true", "false (no KV connector)");
  return r.reasons;
}

std::vector<std::pair<std::string_view, bool>> capability_flags(const Capabilities& c) {
  return {{"mla", c.mla}, {"sparse", c.sparse}, {"block_sparse", c.block_sparse}, {"attention_free", c.attention_free},
          {"sinks", c.sinks}, {"sliding_window", c.sliding_window}, {"soft_cap", c.soft_cap}, {"alibi", c.alibi},
          {"non_causal", c.non_causal}, {"batch_invariance", c.batch_invariance}, {"kv_connector", c.kv_connector},
          {"per_head_quant_scales", c.per_head_quant_scales}, {"mm_prefix", c.mm_prefix},
          {"distinct_head_size_v", c.distinct_head_size_v}};
}

}  // namespace attn
