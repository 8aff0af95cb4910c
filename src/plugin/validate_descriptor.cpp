// Field-by-field checks of a backend descriptor, run by Registry::add for built-ins and plugins
// alike. Each guards a place that would otherwise fail far from the descriptor: a size rule
// stepping by 0 divides by zero in every selection, an enum outside its type indexes past a
// table, a preferred block size of 0 divides by zero when a cache is sized.
#include "plugin/validate_descriptor.hpp"

#include <string_view>

#include "attn/error.hpp"
#include "attn/limits.hpp"
#include "core/names.hpp"
#include "plugin/plugin_text.hpp"

namespace attn::detail {
namespace {

constexpr std::size_t kMaxNameLength = 64;
constexpr std::size_t kMaxSummaryLength = 1024;

// Names travel through ATTN_BACKEND, command lines, file names (lib<module>.so) and JSON; "auto"
// means "no backend forced", so a backend of that name could never be forced.
bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength || is_auto_backend(name)) return false;
  for (char c : name)
    if (c <= ' ' || c > '~' || c == '/') return false;
  return true;
}

// Every enum with a name table prints "?" for a value outside the type.
template <typename E>
bool named(E v) {
  return to_string(v) != "?";
}

class Checker {
 public:
  explicit Checker(const std::string& backend) : prefix_("backend '" + backend + "': ") {}

  template <typename V>
  void require(bool ok, const std::string& field, const V& value, const std::string& expected) const {
    if (!ok) fail_check(prefix_ + field, value, expected);
  }

  template <typename E>
  void enum_value(const std::string& field, E v, const std::string& type) const {
    require(named(v), field, int(v), "a " + type + " value");
  }

  template <typename E>
  void enum_list(const std::string& field, const std::vector<E>& list, const std::string& type) const {
    for (std::size_t i = 0; i < list.size(); ++i) enum_value(field + "[" + std::to_string(i) + "]", list[i], type);
  }

  void positive(const std::string& field, const std::vector<int>& values) const {
    for (std::size_t i = 0; i < values.size(); ++i)
      require(values[i] > 0, field + "[" + std::to_string(i) + "]", values[i], "a positive size");
  }

  void size_rule(const std::string& field, const SizeRule& r) const {
    using K = SizeRule::Kind;
    const int kind = int(r.kind);
    require(kind >= int(K::any) && kind <= int(K::multiple_of), field + ".kind", kind,
            "any, one_of, range or multiple_of (0..3)");
    positive(field + ".extra", r.extra);
    if (r.kind == K::one_of || r.kind == K::multiple_of) {
      require(!r.values.empty(), field + ".values", "[]", r.kind == K::one_of ? "at least one size" : "at least one base");
      positive(field + ".values", r.values);
    }
    if (r.kind == K::range) {
      require(r.lo > 0, field + ".lo", r.lo, "a positive size");
      require(r.hi >= r.lo, field + ".hi", r.hi, ">= lo=" + std::to_string(r.lo));
      require(r.step > 0, field + ".step", r.step, "a positive step");
    }
  }

  void compute_capability(const std::string& field, const std::optional<ComputeCapability>& cc) const {
    if (!cc) return;
    require(cc->major >= 0 && cc->major <= 99 && cc->minor >= 0 && cc->minor <= 9, field, cc->to_string(),
            "major 0..99 and minor 0..9");
  }

 private:
  std::string prefix_;
};

void check_caps(const Checker& c, const Capabilities& caps) {
  c.enum_list("caps.platforms", caps.platforms, "PlatformKind");
  c.enum_list("caps.required_cpu_features", caps.required_cpu_features, "CpuFeature");
  c.compute_capability("caps.min_cc", caps.min_cc);
  c.compute_capability("caps.max_cc", caps.max_cc);
  if (caps.min_cc && caps.max_cc)
    c.require(*caps.min_cc <= *caps.max_cc, "caps.max_cc", caps.max_cc->to_string(), ">= min_cc=" + caps.min_cc->to_string());
  c.enum_list("caps.dtypes", caps.dtypes, "DType");
  c.enum_list("caps.kv_cache_dtypes", caps.kv_cache_dtypes, "KVCacheDType");
  c.enum_list("caps.attn_types", caps.attn_types, "AttnType");
  c.size_rule("caps.head_sizes", caps.head_sizes);
  c.size_rule("caps.block_sizes", caps.block_sizes);
}

void check_layout(const Checker& c, const BackendDescriptor& d) {
  c.enum_value("kv_layout", d.kv_layout, "KVLayout");
  if (!d.kv_layout_rule) return;
  c.enum_list("kv_layout_rule.q_dtypes", d.kv_layout_rule->q_dtypes, "DType");
  c.enum_list("kv_layout_rule.storage_dtypes", d.kv_layout_rule->storage_dtypes, "DType");
  c.enum_value("kv_layout_rule.otherwise", d.kv_layout_rule->otherwise, "KVLayout");
  c.enum_list("kv_layout_rule.cpu_features", d.kv_layout_rule->cpu_features, "CpuFeature");
}

}  // namespace

void validate_descriptor(const BackendDescriptor& d) {
  if (!valid_name(d.name)) {
    std::string quoted = "'";  // built step by step: GCC 12 misreads "'" + s + "'" (-Wrestrict)
    quoted += plain_text(d.name);
    quoted += "'";
    fail_check("backend.name", quoted, "1.." + std::to_string(kMaxNameLength) + " printable ASCII characters, no space or '/', not 'auto'");
  }
  const Checker c(d.name);
  c.require(d.summary.size() <= kMaxSummaryLength && is_plain_text(d.summary), "summary",
            std::to_string(d.summary.size()) + " bytes", "UTF-8 text without control characters, at most " +
                                                             std::to_string(kMaxSummaryLength) + " bytes");
  std::string module = "'";
  module += plain_text(d.module);
  module += "'";
  c.require(d.module.empty() || valid_name(d.module), "module", module,
            "\"\" (built in) or a module name of 1.." + std::to_string(kMaxNameLength) + " printable ASCII characters");
  c.require(!d.module.empty() || bool(d.create), "create", "null",
            "a factory (only a backend with a module may leave it for the module to provide)");
  c.enum_value("device", d.device, "DeviceKind");
  check_caps(c, d.caps);
  check_layout(c, d);
  c.require(d.preferred_block_size > 0 && d.preferred_block_size <= limits::kMaxBlockSize, "preferred_block_size",
            d.preferred_block_size, "1.." + std::to_string(limits::kMaxBlockSize));
  c.require(d.caps.block_sizes.allows(d.preferred_block_size), "preferred_block_size", d.preferred_block_size,
            "a size its own caps.block_sizes allows (" + d.caps.block_sizes.describe() + ")");
}

}  // namespace attn::detail
