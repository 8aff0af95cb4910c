// The selector: reads capabilities and priorities from the registry; names no backend.
#include "attn/selector.hpp"

#include "attn/error.hpp"
#include "attn/registry.hpp"
#include "attn/tune.hpp"
#include "core/log.hpp"
#include "core/names.hpp"
#include "select/measured.hpp"
#include "select/selection.hpp"

namespace attn {
namespace {

using detail::ForcedBackend;
using detail::Outcome;
using Memo = detail::SelectionMemo<LayerConfig, LayerConfigHash>;

// Precedence: per-kind override > explicit argument > config > env ATTN_BACKEND.
ForcedBackend forced_backend(const LayerConfig& c, const SelectOptions& o) {
  auto it = o.per_kind.find(c.kind());
  const std::string_view per_kind = it != o.per_kind.end() ? std::string_view(it->second) : std::string_view();
  return detail::forced_backend({{per_kind, "per_kind"}, {o.backend, "argument"}, {o.config_backend, "config"}}, o.use_env,
                                "ATTN_BACKEND");
}

Memo& memo() {
  static Memo m;
  return m;
}

std::vector<Candidate> check_all(Registry& reg, const LayerConfig& c, const Platform& p, const std::string& forced) {
  std::vector<Candidate> out;
  for (auto& d : reg.backends()) {
    Candidate cand = evaluate(*d, c, p, &reg);
    if (cand.on_platform() || d->name == forced) out.push_back(std::move(cand));  // other platforms are not candidates
  }
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) { return a.priority < b.priority; });
  return out;
}

Outcome compute(Registry& reg, const LayerConfig& c, const Platform& p, const ForcedBackend& f) {
  const std::string& forced = f.name;
  const std::string& forced_by = f.by;
  Outcome o;
  Decision& d = o.decision;
  d.config = c;
  d.platform = p.to_string();
  d.forced_by = forced_by;
  const auto forced_desc = forced.empty() ? nullptr : reg.find(forced);
  if (!forced.empty() && !forced_desc) {
    o.error = detail::unknown_backend_error("attention", f, reg.names());
    o.error_always = true;
    return o;
  }
  // Names match ignoring case (CPU_FLASH, as vLLM spells them); from here on, the registered one.
  const std::string forced_name = forced_desc ? forced_desc->name : std::string();
  d.candidates = check_all(reg, c, p, forced_name);
  std::vector<std::string> valid;
  for (auto& cand : d.candidates) if (cand.valid) valid.push_back(cand.backend);

  const Candidate* chosen = nullptr;
  std::optional<detail::MeasuredPick> pick;
  if (!forced.empty()) {
    for (auto& cand : d.candidates) if (cand.backend == forced_name) chosen = &cand;
    if (!chosen->valid) {
      o.error = "Selected backend " + forced_name + " (from " + forced_by + ") is not valid for this configuration on " + d.platform +
                ". Reasons: " + detail::reasons_text(chosen->reasons) + ". Backends that can serve this layer: " +
                (valid.empty() ? "none" : join(valid)) + ".";
      o.error_always = true;
      return o;
    }
  } else {
    for (auto& cand : d.candidates) if (cand.valid) { chosen = &cand; break; }
    // Measurements apply to the machine they were taken on, and only when nothing is forced.
    if (chosen && p.detected) {
      if (auto tuning = active_tuning()) pick = detail::measured_pick(reg, *tuning, c, d.candidates, p);
      if (pick)
        for (auto& cand : d.candidates) if (cand.backend == pick->backend) chosen = &cand;
    }
    if (!chosen) {
      std::vector<std::string> parts;
      for (auto& cand : d.candidates) parts.push_back(cand.backend + ": " + detail::reasons_text(cand.reasons));
      o.error = "No valid attention backend found for " + d.platform + " with " + c.to_string() + ". Reasons: {" +
                join(parts, ", ") + "}.";
      d.block_size = c.block_size;
      d.block_size_from_user = c.block_size != 0;
      return o;
    }
  }
  d.backend = chosen->backend;
  auto desc = reg.find(d.backend);
  d.variant = desc->variant ? desc->variant(p, c) : "";
  d.block_size_from_user = c.block_size != 0;
  d.block_size = c.block_size ? c.block_size : desc->preferred_block_size;
  if (desc->oracle) {
    // Name what kept each faster backend out (its first reason), so the fix is in the message.
    std::vector<std::string> why;
    for (auto& cand : d.candidates)
      if (!cand.valid && cand.priority < chosen->priority && !cand.reasons.empty())
        why.push_back(cand.backend + ": " + cand.reasons.front().to_string());
    d.slow_path = d.backend + " is the correctness oracle (plain loops), far slower than a production backend; " +
                  (forced.empty() ? "no production backend serves this layer (" + join(why, "; ") + ")"
                                  : "chosen because it was forced (" + forced_by + ")");
  }
  if (pick) {
    d.tuned = true;
    if (!pick->variant.empty()) d.variant = pick->variant;
    d.block_size = pick->block_size;
    d.notes.push_back(pick->note);
  }
  if (c.block_size != 0 && forced.empty()) {
    std::vector<std::string> precluded;
    for (auto& cand : d.candidates) {
      if (cand.priority >= chosen->priority) break;
      if (cand.reasons.size() == 1 && cand.reasons[0].field == ReasonField::block_size) precluded.push_back(cand.backend);
    }
    if (!precluded.empty())
      d.notes.push_back("--block-size " + std::to_string(c.block_size) + " precluded higher-priority backend(s) " +
                        join(precluded) + ". Using " + d.backend +
                        " instead, which may reduce performance. Remove --block-size to let the backend choose.");
  }
  return o;
}

Outcome lookup(const LayerConfig& config, const SelectOptions& options) {
  config.validate();
  const Platform& p = options.platform ? *options.platform : detect_cpu();
  ForcedBackend forced = forced_backend(config, options);
  Registry& reg = options.registry ? *options.registry : Registry::instance();
  // Generations are unique across registries, so the key also tells registries apart.
  Memo::Key key{config, detail::platform_key(p, options.platform.has_value()), forced, reg.generation()};
  return memo().get(std::move(key), [&] { return compute(reg, config, p, forced); },
                    [&](const Memo::Key& k, const Outcome& o) {
                      if (o.error.empty())
                        log_info_once(k.platform + config.to_string() + k.forced.name,
                                      "Using " + o.decision.backend + " for " + config.kind() + " layer (" + o.decision.platform + ")");
                    });
}

}  // namespace

Decision select(const LayerConfig& config, const SelectOptions& options) {
  return detail::decision_or_throw(lookup(config, options));
}

Decision explain(const LayerConfig& config, const SelectOptions& options) {
  return detail::decision_or_throw(lookup(config, options), true);
}

void clear_selector_cache() { memo().clear(); }

SelectorCacheStats selector_cache_stats() { return memo().stats(); }

}  // namespace attn
