#include "models/config_json.hpp"

namespace attn::models {

nlohmann::json parse_config_json(const std::string& text, const std::string& model) {
  return json_file::parse(text, "model '" + model + "': config", {kMaxConfigBytes, kMaxConfigDepth});
}

}  // namespace attn::models
