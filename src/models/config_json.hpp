#pragma once
// Bounded reading of an untrusted config.json: a size cap, a nesting cap, every nlohmann
// failure turned into an attn::Error naming the model and the field, and a printable preview
// of any value that never recurses without bound.
#include <nlohmann/json.hpp>

#include "attn/limits.hpp"

#include <cstddef>
#include <string>

namespace attn::models {

/// Largest config.json read (real ones are a few KiB; the largest HF configs stay under 1 MiB).
inline constexpr std::size_t kMaxConfigBytes = std::size_t(16) << 20;
/// Deepest nesting accepted (HF configs nest 3-4 levels: rope_scaling, quantization_config).
inline constexpr int kMaxConfigDepth = 64;
/// Most layers a model may declare; it bounds every per-layer allocation a config can request.
inline constexpr int kMaxLayers = limits::kMaxLayers;

/// Parses `text` as the config of model `model`. Throws attn::Error for an oversize file, too
/// deep nesting, invalid JSON or a number out of range, naming the field (dotted path) it was in.
nlohmann::json parse_config_json(const std::string& text, const std::string& model);

/// `s` cut to `max` characters (with "..."): config strings reach error messages, and a
/// string value may be megabytes long.
std::string clip(const std::string& s, std::size_t max = 64);

/// A short, bounded text for `v` in error messages: scalars as JSON (long strings cut),
/// lists and objects as their kind and size; never walks nested values.
std::string preview(const nlohmann::json& v);

}  // namespace attn::models
