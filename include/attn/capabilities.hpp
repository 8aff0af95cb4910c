#pragma once
/// Capabilities as data: what a backend can serve. One generic checker (select/checker.cpp)
/// turns Capabilities × LayerConfig × Platform into Reasons, in a fixed order.
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attn/layer_config.hpp"
#include "attn/platform.hpp"
#include "attn/types.hpp"

namespace attn {

/// The fields the generic checker (and the selector) can name in a Reason, in the checker's
/// order. A backend's own extra checks may name any other LayerConfig field ("index_topk"):
/// those are `other`, kept by name. Names: to_string / ReasonFieldName.
enum class ReasonField : uint8_t {
  platform, module, head_size, head_size_v, dtype, kv_cache_dtype, block_size, use_mm_prefix, use_mla, has_sink,
  use_sparse, use_block_sparse, is_attention_free, use_per_head_quant_scales, compute_capability, cpu_features,
  attn_type, sliding_window, logits_soft_cap, use_alibi, use_non_causal, use_batch_invariant, use_kv_connector,
  mamba_type,  // mixer selection: the layer's MambaType is not one the mixer backend serves
  other
};
std::string_view to_string(ReasonField f);  // "dtype", ...; "" for other

/// A Reason's field: its ReasonField and its name (the LayerConfig field name users see).
/// Built from a ReasonField, or from a name (a known name maps to its ReasonField, any other
/// is `other`), so backends and plugins may keep writing Reason{"index_topk", ...}.
class ReasonFieldName {
 public:
  ReasonFieldName() = default;
  ReasonFieldName(ReasonField f);          // NOLINT(google-explicit-constructor)
  ReasonFieldName(std::string name);       // NOLINT(google-explicit-constructor)
  ReasonFieldName(const char* name) : ReasonFieldName(std::string(name)) {}  // NOLINT
  ReasonField id() const { return id_; }
  const std::string& name() const { return name_; }
  operator const std::string&() const { return name_; }  // NOLINT: reads as the name
  friend bool operator==(const ReasonFieldName& a, const ReasonFieldName& b) { return a.name_ == b.name_; }
  friend bool operator==(const ReasonFieldName& a, ReasonField f) { return a.id_ == f; }
  friend bool operator==(const ReasonFieldName& a, const char* n) { return a.name_ == n; }
  friend bool operator==(const ReasonFieldName& a, const std::string& n) { return a.name_ == n; }
  friend bool operator==(const ReasonFieldName& a, std::string_view n) { return a.name_ == n; }

 private:
  ReasonField id_ = ReasonField::other;
  std::string name_;
};
std::ostream& operator<<(std::ostream& os, const ReasonFieldName& f);

/// Why a backend cannot serve a layer: `field` (a LayerConfig or platform field),
/// `value` (what the layer has), `expected` (what the backend supports).
struct Reason {
  ReasonFieldName field;
  std::string value;
  std::string expected;
  bool operator==(const Reason&) const = default;
  std::string to_string() const;  // "head_size=72, expected one of 64, 128, 256"
};

/// A rule over integer sizes (head sizes, block sizes).
struct SizeRule {
  enum class Kind { any, one_of, range, multiple_of };
  Kind kind = Kind::any;
  std::vector<int> values;  // one_of: the set; multiple_of: the allowed bases (any one divides)
  int lo = 0, hi = 0, step = 1;  // range: lo <= x <= hi and (x - lo) % step == 0

  static SizeRule any() { return {}; }
  static SizeRule one_of(std::vector<int> v) { return make(Kind::one_of, std::move(v), 0, 0, 1); }
  static SizeRule range(int lo, int hi, int step) { return make(Kind::range, {}, lo, hi, step); }
  static SizeRule multiple_of(std::vector<int> bases) { return make(Kind::multiple_of, std::move(bases), 0, 0, 1); }
  /// range ∪ extra values
  SizeRule plus(std::vector<int> extra) const;
  std::vector<int> extra;

  bool allows(int x) const;
  std::string describe() const;  // "any", "one of 64, 128, 256", "32..256 step 8", "a multiple of 16"

 private:
  static SizeRule make(Kind k, std::vector<int> v, int lo, int hi, int step) {
    SizeRule r;
    r.kind = k;
    r.values = std::move(v);
    r.lo = lo;
    r.hi = hi;
    r.step = step;
    return r;
  }
};

struct Capabilities {
  std::vector<PlatformKind> platforms{PlatformKind::cpu};
  std::vector<CpuFeature> required_cpu_features;   // all required (cpu platform)
  std::optional<ComputeCapability> min_cc, max_cc;  // cuda platform
  std::vector<DType> dtypes{DType::float16, DType::bfloat16};
  std::vector<KVCacheDType> kv_cache_dtypes{KVCacheDType::auto_, KVCacheDType::float16, KVCacheDType::bfloat16};
  SizeRule head_sizes;
  SizeRule block_sizes;
  bool distinct_head_size_v = false;  // head_size_v may differ from head_size
  bool mla = false;                   // serves MLA layers (and only those)
  bool sparse = false;                // serves top-k sparse layers (and only those)
  bool block_sparse = false;          // serves block-sparse layers (and only those)
  bool attention_free = false;        // serves attention-free layers (and only those)
  bool sinks = false;
  bool sliding_window = false;
  bool soft_cap = false;
  bool alibi = false;
  bool non_causal = false;
  bool batch_invariance = false;
  bool kv_connector = true;
  bool per_head_quant_scales = false;
  bool mm_prefix = false;
  std::vector<AttnType> attn_types{AttnType::decoder};
};

/// The generic checker. Order of reasons: the ReasonField order (platform, head_size, ...,
/// use_kv_connector; module comes from the registry, see evaluate() in selector.hpp).
std::vector<Reason> check_capabilities(const Capabilities& caps, const LayerConfig& cfg, const Platform& platform);

/// The feature flags a Capabilities declares, by name ("mla", "sinks", "sliding_window", ...),
/// in declaration order: the one table `attn backends`, JSON and Python read.
std::vector<std::pair<std::string_view, bool>> capability_flags(const Capabilities& caps);
/// {"platforms":[..],"dtypes":[..],"kv_cache_dtypes":[..],"head_sizes":"..","block_sizes":"..",
///  "attn_types":[..],"features":[enabled flags],"required_cpu_features":[..],
///  "min_compute_capability":"8.0" (when set), "max_compute_capability":..} as JSON text.
std::string to_json(const Capabilities& caps);

}  // namespace attn
