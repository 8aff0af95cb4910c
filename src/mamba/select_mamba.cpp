// select_mamba: MambaType × Platform (× forced backend) → Decision. The mapping is the registry's
// data (each descriptor's capabilities: the types it serves, its platforms; the first registered
// valid one wins), checked with the attention checker's platform checks. The memo, the
// forced-backend precedence and the unknown-backend error are the attention selector's
// (select/selection.hpp).
#include "attn/mamba.hpp"

#include <algorithm>

#include "attn/error.hpp"
#include "core/names.hpp"
#include "select/platform_checks.hpp"
#include "select/selection.hpp"

namespace attn {

namespace {

using detail::ForcedBackend;
using detail::Outcome;
using Memo = detail::SelectionMemo<MambaType, std::hash<MambaType>>;

Memo& memo() {
  static Memo m;
  return m;
}

Outcome decide(const MixerRegistry& reg, MambaType type, const ForcedBackend& forced, const Platform& platform) {
  Outcome o;
  const std::string type_name(to_string(type));
  const auto forced_desc = forced.name.empty() ? nullptr : reg.find(forced.name);  // any case
  if (!forced.name.empty() && !forced_desc) {
    o.error = detail::unknown_backend_error("mixer", forced, reg.names());
    o.error_always = true;
    return o;
  }
  const auto backends = reg.backends();
  Decision& d = o.decision;
  d.platform = platform.to_string();
  d.forced_by = forced.by;
  d.notes.push_back("mixer layer: mamba_type=" + type_name);
  std::shared_ptr<const MixerDescriptor> chosen;
  std::size_t forced_index = backends.size();
  std::vector<std::string> would_serve, why_not;
  for (std::size_t i = 0; i < backends.size(); ++i) {
    const MixerDescriptor& b = *backends[i];
    Candidate c{b.name, false, int(i), check_mixer_capabilities(b.caps, type, platform)};
    c.valid = c.reasons.empty();
    if (c.valid) {
      would_serve.push_back(b.name);
      if (!chosen) chosen = backends[i];
    } else {
      why_not.push_back(b.name + ": " + detail::reasons_text(c.reasons));
    }
    d.candidates.push_back(std::move(c));
    if (backends[i] == forced_desc) forced_index = i;
  }
  if (forced_index < backends.size() && !d.candidates[forced_index].valid) {
    o.error = "mixer backend '" + forced.name + "' (forced by " + forced.by + ") cannot serve mamba_type=" + type_name +
              " on " + d.platform + ": " + detail::reasons_text(d.candidates[forced_index].reasons) + "; backends that would: " +
              (would_serve.empty() ? std::string("none") : join(would_serve));
    o.error_always = true;
    return o;
  }
  if (forced_desc) chosen = forced_desc;
  if (!chosen) {
    o.error = "no mixer backend serves mamba_type=" + type_name + " on " + d.platform + ". Reasons: {" + join(why_not, ", ") +
              "}; provide one with attn::register_mixer(MixerDescriptor{.caps = {.types = {MambaType::" + type_name +
              "}}, ...})";
    return o;
  }
  d.backend = chosen->name;
  d.variant = chosen->variant ? chosen->variant(platform) : std::string();
  return o;
}

Outcome lookup(MambaType type, const MambaSelectOptions& options) {
  // Precedence: argument > env ATTN_MAMBA_BACKEND.
  ForcedBackend forced = detail::forced_backend({{options.backend, "argument"}}, options.use_env, "ATTN_MAMBA_BACKEND");
  const Platform& platform = options.platform ? *options.platform : detect_cpu();
  const MixerRegistry& reg = options.registry ? *options.registry : MixerRegistry::instance();
  // Generations are unique across mixer registries, so the key also tells registries apart.
  Memo::Key key{type, detail::platform_key(platform, options.platform.has_value()), forced, reg.generation()};
  return memo().get(std::move(key), [&] { return decide(reg, type, forced, platform); });
}

}  // namespace

std::vector<Reason> check_mixer_capabilities(const MixerCapabilities& caps, MambaType type, const Platform& platform) {
  std::vector<Reason> reasons;
  if (auto r = detail::platform_reason(caps.platforms, platform)) reasons.push_back(std::move(*r));
  if (std::find(caps.types.begin(), caps.types.end(), type) == caps.types.end()) {
    std::vector<std::string> types;
    for (MambaType t : caps.types) types.emplace_back(to_string(t));
    reasons.push_back(Reason{ReasonField::mamba_type, std::string(to_string(type)), "one of " + join(types)});
  }
  if (auto r = detail::machine_reason(caps.required_cpu_features, caps.min_cc, caps.max_cc, platform))
    reasons.push_back(std::move(*r));
  return reasons;
}

Decision select_mamba(MambaType type, const MambaSelectOptions& options) {
  return detail::decision_or_throw(lookup(type, options));
}

Decision explain_mamba(MambaType type, const MambaSelectOptions& options) {
  return detail::decision_or_throw(lookup(type, options), true);
}

void clear_mamba_selector_cache() { memo().clear(); }

SelectorCacheStats mamba_selector_cache_stats() { return memo().stats(); }

}  // namespace attn
