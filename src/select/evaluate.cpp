// evaluate(): the one place that lists every reason a backend cannot serve a layer.
#include "attn/backend.hpp"
#include "attn/registry.hpp"
#include "attn/selector.hpp"

namespace attn {

Candidate evaluate(const BackendDescriptor& d, const LayerConfig& c, const Platform& p, Registry* modules) {
  Candidate out{d.name, false, d.priority, check_capabilities(d.caps, c, p)};
  if (!out.on_platform()) return out;  // other platforms' rules say nothing here
  if (d.extra_checks) {
    auto more = d.extra_checks(c, p);
    out.reasons.insert(out.reasons.end(), more.begin(), more.end());
  }
  // Loading a module only makes sense on the machine itself, not for a planning target.
  std::string why;
  if (modules && p.detected && !d.module.empty() && !modules->ensure_module(d, why))
    out.reasons.insert(out.reasons.begin(), Reason{ReasonField::module, d.module + " not loaded: " + why, "a loadable module"});
  out.valid = out.reasons.empty();
  return out;
}

}  // namespace attn
