// The selector: reads capabilities and priorities from the registry; names no backend.
#include "attn/selector.hpp"

#include <atomic>
#include <cstdlib>
#include <shared_mutex>
#include <unordered_map>
#include <variant>

#include "attn/error.hpp"
#include "attn/registry.hpp"
#include "attn/tune.hpp"
#include "core/log.hpp"
#include "core/names.hpp"
#include "select/measured.hpp"

namespace attn {
namespace {

// Precedence: per-kind override > explicit argument > config > env ATTN_BACKEND.
std::pair<std::string, std::string> forced_backend(const LayerConfig& c, const SelectOptions& o) {
  auto it = o.per_kind.find(c.kind());
  if (it != o.per_kind.end() && !detail::is_auto_backend(it->second)) return {it->second, "per_kind"};
  if (!detail::is_auto_backend(o.backend)) return {o.backend, "argument"};
  if (!detail::is_auto_backend(o.config_backend)) return {o.config_backend, "config"};
  if (o.use_env)
    if (const char* env = std::getenv("ATTN_BACKEND"); env && !detail::is_auto_backend(env)) return {env, "env ATTN_BACKEND"};
  return {"", ""};
}

struct Key {
  LayerConfig config;
  std::string platform;
  std::string forced;
  std::string forced_by;
  uint64_t generation;
  bool operator==(const Key&) const = default;
};
struct KeyHash {
  std::size_t operator()(const Key& k) const {
    std::size_t h = k.config.hash();
    for (const std::string* s : {&k.platform, &k.forced, &k.forced_by}) h = h * 1099511628211ull ^ std::hash<std::string>{}(*s);
    return h ^ k.generation;
  }
};

// A computed outcome: the decision, or the error message select() must throw.
struct Outcome {
  Decision decision;
  std::string error;        // non-empty: select() throws this
  bool error_always = false;  // also thrown by explain() (forced-backend errors)
};

struct Cache {
  std::shared_mutex mu;
  std::unordered_map<Key, Outcome, KeyHash> map;
  std::atomic<uint64_t> hits{0}, misses{0};
};
Cache& cache() {
  static Cache c;
  return c;
}

std::string reasons_text(const std::vector<Reason>& rs) {
  std::vector<std::string> parts;
  for (auto& r : rs) parts.push_back(r.to_string());
  const std::string joined = join(parts, "; ");
  return "[" + joined + "]";
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

Outcome compute(Registry& reg, const LayerConfig& c, const Platform& p, const std::string& forced, const std::string& forced_by) {
  Outcome o;
  Decision& d = o.decision;
  d.config = c;
  d.platform = p.to_string();
  d.forced_by = forced_by;
  const auto forced_desc = forced.empty() ? nullptr : reg.find(forced);
  if (!forced.empty() && !forced_desc) {
    o.error = "Unknown attention backend: '" + forced + "' (from " + forced_by + "). Valid options are: " + join(reg.names());
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
                ". Reasons: " + reasons_text(chosen->reasons) + ". Backends that can serve this layer: " +
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
      for (auto& cand : d.candidates) parts.push_back(cand.backend + ": " + reasons_text(cand.reasons));
      o.error = "No valid attention backend found for " + d.platform + " with " + c.to_string() + ". Reasons: {" +
                join(parts, ", ") + "}.";
      d.block_size = c.block_size;
      d.block_size_from_user = c.block_size != 0;
      return o;
    }
  }
  d.backend = chosen->backend;
  auto desc = reg.find(d.backend);
  d.variant = desc->variant ? desc->variant(p) : "";
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
  auto [forced, forced_by] = forced_backend(config, options);
  // This machine's fingerprint never changes: compute it once, not per lookup.
  static const std::string detected_fingerprint = detect_cpu().fingerprint();
  std::string fingerprint = options.platform ? p.fingerprint() + (p.detected ? "" : "/planned") : detected_fingerprint;
  Registry& reg = options.registry ? *options.registry : Registry::instance();
  // Generations are unique across registries, so the key also tells registries apart.
  Key key{config, std::move(fingerprint), std::move(forced), std::move(forced_by), reg.generation()};
  Cache& c = cache();
  {
    std::shared_lock lock(c.mu);
    auto it = c.map.find(key);
    if (it != c.map.end()) {
      c.hits.fetch_add(1, std::memory_order_relaxed);
      return it->second;
    }
  }
  c.misses.fetch_add(1, std::memory_order_relaxed);
  Outcome o = compute(reg, config, p, key.forced, key.forced_by);
  if (o.error.empty())
    log_info_once(key.platform + config.to_string() + key.forced,
                  "Using " + o.decision.backend + " for " + config.kind() + " layer (" + o.decision.platform + ")");
  std::unique_lock lock(c.mu);
  return c.map.emplace(std::move(key), std::move(o)).first->second;
}

}  // namespace

Decision select(const LayerConfig& config, const SelectOptions& options) {
  Outcome o = lookup(config, options);
  if (!o.error.empty()) throw Error(o.error);
  return o.decision;
}

Decision explain(const LayerConfig& config, const SelectOptions& options) {
  Outcome o = lookup(config, options);
  if (!o.error.empty() && o.error_always) throw Error(o.error);
  return o.decision;
}

void clear_selector_cache() {
  Cache& c = cache();
  std::unique_lock lock(c.mu);
  c.map.clear();
  c.hits = 0;
  c.misses = 0;
}

SelectorCacheStats selector_cache_stats() {
  Cache& c = cache();
  std::shared_lock lock(c.mu);
  return {c.hits.load(), c.misses.load(), c.map.size()};
}

}  // namespace attn
