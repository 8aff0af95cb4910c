// The selection pieces both selectors share (see selection.hpp).
#include "select/selection.hpp"

#include <cstdlib>

#include "attn/error.hpp"
#include "core/names.hpp"

namespace attn::detail {

ForcedBackend forced_backend(std::initializer_list<std::pair<std::string_view, std::string_view>> sources, bool use_env,
                             const char* env_var) {
  for (auto [value, label] : sources)
    if (!is_auto_backend(value)) return {std::string(value), std::string(label)};
  if (use_env)
    if (const char* env = std::getenv(env_var); env && !is_auto_backend(env)) return {env, "env " + std::string(env_var)};
  return {};
}

std::string unknown_backend_error(std::string_view what, const ForcedBackend& forced, const std::vector<std::string>& known) {
  return "Unknown " + std::string(what) + " backend: '" + forced.name + "' (from " + forced.by +
         "). Valid options are: " + join(known);
}

std::string reasons_text(const std::vector<Reason>& reasons) {
  std::vector<std::string> parts;
  for (const Reason& r : reasons) parts.push_back(r.to_string());
  const std::string joined = join(parts, "; ");
  return "[" + joined + "]";
}

std::string platform_key(const Platform& p, bool given) {
  // This machine's fingerprint never changes: compute it once, not per lookup.
  static const std::string detected_fingerprint = detect_cpu().fingerprint();
  return given ? p.fingerprint() + (p.detected ? "" : "/planned") : detected_fingerprint;
}

Decision decision_or_throw(const Outcome& o, bool explaining) {
  if (!o.error.empty() && (!explaining || o.error_always)) throw Error(o.error);
  return o.decision;
}

}  // namespace attn::detail
