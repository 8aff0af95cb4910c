#pragma once
// Per-layer type lists: the config's own `layer_types` when present (newer transformers write
// it for every hybrid or windowed model), else the architecture's rule.
#include <functional>
#include <string>
#include <vector>

#include "models/config_reader.hpp"

namespace attn::models {

/// `layer_types` from the config (checked: one entry per layer, each in `allowed`), or
/// `rule(i)` for every layer when the config has none.
inline std::vector<std::string> layer_types(const ConfigReader& cfg, int num_layers,
                                            const std::vector<std::string>& allowed,
                                            const std::function<std::string(int)>& rule) {
  std::vector<std::string> types;
  if (cfg.has("layer_types")) {
    types = cfg.strings("layer_types", kMaxLayers);
    if (int(types.size()) != num_layers) {
      cfg.fail("layer_types", std::to_string(types.size()) + " entries",
               "one entry per layer (num_hidden_layers=" + std::to_string(num_layers) + ")");
    }
    for (size_t i = 0; i < types.size(); ++i) {
      bool ok = false;
      for (const auto& a : allowed) ok = ok || types[i] == a;
      if (!ok) {
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        const std::string index = std::to_string(i), value = clip(types[i]);
        cfg.fail("layer_types[" + index + "]", "'" + value + "'", "one of " + list);
      }
    }
    return types;
  }
  for (int i = 0; i < num_layers; ++i) types.push_back(rule(i));
  return types;
}

}  // namespace attn::models
