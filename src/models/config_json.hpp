#pragma once
// Bounded reading of an untrusted config.json, through the one JSON reader (core/json_file.hpp):
// the config's size and nesting caps, and errors that name the model and the field.
#include <nlohmann/json.hpp>

#include "attn/limits.hpp"
#include "core/json_file.hpp"

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

using json_file::clip;
using json_file::preview;

}  // namespace attn::models
