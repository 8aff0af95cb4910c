// select_mamba: MambaType (× forced backend) → Decision. The mapping is the registry's data
// (each descriptor lists the types it serves; the first registered wins), cached, thread-safe.
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <tuple>

#include "core/names.hpp"
#include "attn/error.hpp"
#include "attn/mamba.hpp"
#include "mamba/mixer_registry.hpp"

namespace attn {

namespace {

struct Key {
  MambaType type;
  std::string forced, forced_by, platform;
  uint64_t generation;
  bool operator<(const Key& o) const {
    return std::tie(type, forced, forced_by, platform, generation) <
           std::tie(o.type, o.forced, o.forced_by, o.platform, o.generation);
  }
};

struct Cache {
  std::shared_mutex mu;
  std::map<Key, Decision> decisions;
  std::atomic<uint64_t> hits{0}, misses{0};
};

Cache& cache() {
  static Cache c;
  return c;
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

Decision decide(MambaType type, const std::string& forced, const std::string& forced_by, const Platform& platform) {
  const auto backends = mixer_backends();
  Decision d;
  d.platform = platform.to_string();
  d.forced_by = forced_by;
  d.notes.push_back("mixer layer: mamba_type=" + std::string(to_string(type)));
  std::shared_ptr<const MixerDescriptor> chosen;
  std::vector<std::string> would_serve;
  for (std::size_t i = 0; i < backends.size(); ++i) {
    const MixerDescriptor& b = *backends[i];
    Candidate c;
    c.backend = b.name;
    c.priority = int(i);
    c.valid = serves(b, type);
    if (c.valid) {
      would_serve.push_back(b.name);
      if (!chosen && forced.empty()) chosen = backends[i];
    } else {
      c.reasons.push_back(Reason{"mamba_type", std::string(to_string(type)), "one of " + types_text(b)});
    }
    d.candidates.push_back(std::move(c));
  }
  if (!forced.empty()) {
    auto f = find_mixer(forced);
    if (!f) {
      throw Error("mixer backend '" + forced + "' (forced by " + forced_by +
                  ") unknown: known mixer backends are " + join(mixer_backend_names()));
    }
    if (!serves(*f, type)) {
      throw Error("mixer backend '" + forced + "' (forced by " + forced_by + ") cannot serve mamba_type=" +
                  std::string(to_string(type)) + ": it serves " + types_text(*f) + "; backends that would: " +
                  (would_serve.empty() ? std::string("none") : join(would_serve)));
    }
    chosen = f;
  }
  if (!chosen) {
    throw Error("no mixer backend serves mamba_type=" + std::string(to_string(type)) +
                " (known mixer backends: " + join(mixer_backend_names()) +
                "); provide one with attn::register_mixer(MixerDescriptor{.types = {MambaType::" +
                std::string(to_string(type)) + "}, ...})");
  }
  d.backend = chosen->name;
  d.variant = chosen->variant ? chosen->variant(platform) : std::string();
  return d;
}

}  // namespace

Decision select_mamba(MambaType type, const MambaSelectOptions& options) {
  std::string forced, forced_by;
  if (!detail::is_auto_backend(options.backend)) {
    forced = options.backend;
    forced_by = "argument";
  } else if (options.use_env) {
    const char* env = std::getenv("ATTN_MAMBA_BACKEND");
    if (env && !detail::is_auto_backend(env)) {
      forced = env;
      forced_by = "env ATTN_MAMBA_BACKEND";
    }
  }
  const Platform platform = options.platform ? *options.platform : detect_cpu();
  const Key key{type, forced, forced_by, platform.fingerprint(), mixer_registry_generation()};
  Cache& c = cache();
  {
    std::shared_lock lock(c.mu);
    auto it = c.decisions.find(key);
    if (it != c.decisions.end()) {
      ++c.hits;
      return it->second;
    }
  }
  Decision d = decide(type, forced, forced_by, platform);  // throws: errors are not cached
  ++c.misses;
  std::unique_lock lock(c.mu);
  c.decisions.emplace(key, d);
  return d;
}

void clear_mamba_selector_cache() {
  Cache& c = cache();
  std::unique_lock lock(c.mu);
  c.decisions.clear();
  c.hits = 0;
  c.misses = 0;
}

SelectorCacheStats mamba_selector_cache_stats() {
  Cache& c = cache();
  std::shared_lock lock(c.mu);
  return SelectorCacheStats{c.hits.load(), c.misses.load(), c.decisions.size()};
}

}  // namespace attn
