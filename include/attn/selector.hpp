#pragma once
/// The selector: LayerConfig × Platform (× forced backend) → Decision. Cached, thread-safe,
/// and it names no backend: it reads the registry's data.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "attn/capabilities.hpp"
#include "attn/layer_config.hpp"
#include "attn/platform.hpp"

namespace attn {

struct BackendDescriptor;
class Registry;

struct SelectOptions {
  std::string backend;           // explicit argument ("" or "auto" = none): highest precedence
  std::string config_backend;    // from the engine / model config: next
  bool use_env = true;           // then env ATTN_BACKEND
  /// Per layer-kind overrides (LayerConfig::kind() → backend), applied before `backend`.
  std::map<std::string, std::string> per_kind;
  std::optional<Platform> platform;  // default: this machine's CPU
  Registry* registry = nullptr;      // the backends to choose from; default Registry::instance()
};

struct Candidate {
  std::string backend;
  bool valid = false;
  int priority = 0;
  std::vector<Reason> reasons;
  /// False when the platform alone rules the backend out (its first reason is `platform`).
  bool on_platform() const { return reasons.empty() || reasons.front().field != ReasonField::platform; }
};

/// The one checker: every reason `backend` cannot serve `config` on `platform`, in a fixed order:
/// the generic capability checks (check_capabilities), then the backend's extra checks (not run
/// when the platform alone rules it out). Given `modules` and the detected machine, a backend on
/// this platform whose module cannot be loaded (loading it if needed) gets a leading `module`
/// reason. The selector, `attn check` and the conformance generator all ask this.
Candidate evaluate(const BackendDescriptor& backend, const LayerConfig& config, const Platform& platform,
                   Registry* modules = nullptr);

/// {"backend":..,"valid":..,"priority":..,"reasons":[{"field":..,"value":..,"expected":..}]} (JSON text).
std::string to_json(const Candidate& candidate);

struct Decision {
  std::string backend;           // the chosen backend
  std::string variant;           // its kernel variant on this platform (may be empty)
  std::optional<LayerConfig> config;  // the attention layer decided for; empty for a mixer (select_mamba)
  std::string platform;          // Platform::to_string()
  std::string forced_by;         // "", "argument", "config", "per_kind", "env ATTN_BACKEND"
  int block_size = 0;            // the user's, else the measured fastest (tuned), else the backend's preferred
  bool block_size_from_user = false;
  /// A tuning file's measurement chose backend, variant and block size (see attn/tune.hpp; the
  /// note says by how much). Run it with LayerParams::variant = variant.
  bool tuned = false;
  std::vector<Candidate> candidates;  // every backend checked, in priority order
  std::vector<std::string> notes;     // e.g. "--block-size 8 precluded higher-priority backend(s) ..."
  /// Set when the chosen backend is the slow correctness oracle (BackendDescriptor::oracle): why.
  std::string slow_path;

  std::string to_text() const;
  std::string to_json() const;        // attn::to_json(*this)
};

/// {"backend":..,"variant":..,"platform":..,"config":{..},"candidates":[..],"notes":[..],...} (JSON
/// text: libattn keeps its JSON library private, so every to_json here returns text).
std::string to_json(const Decision& decision);

/// Picks the backend for one layer, or throws attn::Error explaining why none can serve it.
Decision select(const LayerConfig& config, const SelectOptions& options = {});
/// Same as select() but returns the decision even when no backend is valid
/// (backend empty; the candidates carry the reasons). Forced-backend errors still throw.
Decision explain(const LayerConfig& config, const SelectOptions& options = {});
void clear_selector_cache();
struct SelectorCacheStats { uint64_t hits = 0, misses = 0, entries = 0; };
SelectorCacheStats selector_cache_stats();

/// The config as JSON text (used by Decision::to_json and the CLI).
std::string layer_config_json(const LayerConfig& c);

}  // namespace attn
