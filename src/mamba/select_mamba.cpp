// select_mamba: MambaType (× forced backend) → Decision. The mapping is the registry's data
// (each descriptor lists the types it serves; the first registered wins). The memo, the
// forced-backend precedence and the unknown-backend error are the attention selector's
// (select/selection.hpp).
#include "attn/mamba.hpp"

#include "attn/error.hpp"
#include "core/names.hpp"
#include "mamba/mixer_registry.hpp"
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

bool serves(const MixerDescriptor& d, MambaType t) {
  for (MambaType x : d.types)
    if (x == t) return true;
  return false;
}

std::string types_text(const MixerDescriptor& d) {
  std::vector<std::string> names;
  for (MambaType t : d.types) names.emplace_back(to_string(t));
  return join(names);
}

Outcome decide(MambaType type, const ForcedBackend& forced, const Platform& platform) {
  Outcome o;
  o.error_always = true;  // select_mamba has no explain(): every error throws
  const std::string type_name(to_string(type));
  const auto forced_desc = forced.name.empty() ? nullptr : find_mixer(forced.name);  // any case
  if (!forced.name.empty() && !forced_desc) {
    o.error = detail::unknown_backend_error("mixer", forced, mixer_backend_names());
    return o;
  }
  const auto backends = mixer_backends();
  Decision& d = o.decision;
  d.platform = platform.to_string();
  d.forced_by = forced.by;
  d.notes.push_back("mixer layer: mamba_type=" + type_name);
  std::shared_ptr<const MixerDescriptor> chosen = forced_desc;
  std::vector<std::string> would_serve;
  for (std::size_t i = 0; i < backends.size(); ++i) {
    const MixerDescriptor& b = *backends[i];
    Candidate c{b.name, serves(b, type), int(i), {}};
    if (c.valid) {
      would_serve.push_back(b.name);
      if (!chosen) chosen = backends[i];
    } else {
      c.reasons.push_back(Reason{ReasonField::mamba_type, type_name, "one of " + types_text(b)});
    }
    d.candidates.push_back(std::move(c));
  }
  if (forced_desc && !serves(*forced_desc, type)) {
    o.error = "mixer backend '" + forced.name + "' (forced by " + forced.by + ") cannot serve mamba_type=" + type_name +
              ": it serves " + types_text(*forced_desc) + "; backends that would: " +
              (would_serve.empty() ? std::string("none") : join(would_serve));
    return o;
  }
  if (!chosen) {
    o.error = "no mixer backend serves mamba_type=" + type_name + " (known mixer backends: " + join(mixer_backend_names()) +
              "); provide one with attn::register_mixer(MixerDescriptor{.types = {MambaType::" + type_name + "}, ...})";
    return o;
  }
  d.backend = chosen->name;
  d.variant = chosen->variant ? chosen->variant(platform) : std::string();
  return o;
}

}  // namespace

Decision select_mamba(MambaType type, const MambaSelectOptions& options) {
  // Precedence: argument > env ATTN_MAMBA_BACKEND.
  ForcedBackend forced = detail::forced_backend({{options.backend, "argument"}}, options.use_env, "ATTN_MAMBA_BACKEND");
  const Platform& platform = options.platform ? *options.platform : detect_cpu();
  Memo::Key key{type, detail::platform_key(platform, options.platform.has_value()), forced, mixer_registry_generation()};
  return detail::decision_or_throw(memo().get(std::move(key), [&] { return decide(type, forced, platform); }));
}

void clear_mamba_selector_cache() { memo().clear(); }

SelectorCacheStats mamba_selector_cache_stats() { return memo().stats(); }

}  // namespace attn
