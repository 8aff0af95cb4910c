#pragma once
// The JSON renderings behind the public to_json() text functions, as nlohmann::json values so
// the library composes them (a plan holds decisions, a decision holds candidates) without
// re-parsing. Internal: libattn links nlohmann-json privately.
#include <nlohmann/json.hpp>

#include "attn/backend.hpp"
#include "attn/selector.hpp"

namespace attn::detail {

nlohmann::json json_of(const Capabilities& caps);
nlohmann::json json_of(const BackendDescriptor& backend, const Platform& platform);
nlohmann::json json_of(const Candidate& candidate);
nlohmann::json json_of(const LayerConfig& config);
nlohmann::json json_of(const Decision& decision);

}  // namespace attn::detail
