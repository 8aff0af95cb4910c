// Renders a Decision as text and JSON; the same object feeds errors, the CLI, logs and Python.
#include <functional>

#include <nlohmann/json.hpp>

#include "attn/selector.hpp"

namespace attn {
namespace detail {
void layer_config_fields(const LayerConfig& c, const std::function<void(const char*, const std::string&, char)>& f);
}

namespace {
nlohmann::json config_json(const LayerConfig& c) {
  nlohmann::json j = nlohmann::json::object();
  detail::layer_config_fields(c, [&](const char* name, const std::string& text, char kind) {
    if (kind == 'b') j[name] = (text == "true");
    else if (kind == 'n') j[name] = nlohmann::json::parse(text);
    else j[name] = text;
  });
  return j;
}
}  // namespace

std::string layer_config_json(const LayerConfig& c) { return config_json(c).dump(); }

std::string Decision::to_json() const {
  nlohmann::json j;
  j["backend"] = backend;
  j["variant"] = variant;
  j["platform"] = platform;
  j["forced_by"] = forced_by;
  j["block_size"] = block_size;
  j["block_size_from_user"] = block_size_from_user;
  j["tuned"] = tuned;
  j["config"] = config_json(config);
  j["candidates"] = nlohmann::json::array();
  for (auto& c : candidates) {
    nlohmann::json cj{{"backend", c.backend}, {"valid", c.valid}, {"priority", c.priority}, {"reasons", nlohmann::json::array()}};
    for (auto& r : c.reasons) cj["reasons"].push_back({{"field", r.field}, {"value", r.value}, {"expected", r.expected}});
    j["candidates"].push_back(cj);
  }
  j["notes"] = notes;
  j["slow_path"] = slow_path;
  return j.dump();
}

std::string Decision::to_text() const {
  std::string s = backend.empty() ? "no valid backend" : "backend: " + backend;
  if (!variant.empty()) s += " [" + variant + "]";
  if (!forced_by.empty()) s += " (forced by " + forced_by + ")";
  if (!slow_path.empty()) s += "\nslow reference path: " + slow_path;
  s += "\nplatform: " + platform + "\nlayer: " + config.to_string();
  s += "\nblock_size: " + std::to_string(block_size) +
       (block_size_from_user ? " (user)" : tuned ? " (measured fastest)" : " (backend's preferred)");
  s += "\ncandidates:";
  for (auto& c : candidates) {
    s += "\n  " + std::string(c.backend == backend ? "* " : "  ") + c.backend + " (priority " + std::to_string(c.priority) +
         "): " + (c.valid ? "valid" : "invalid");
    for (auto& r : c.reasons) s += "\n      - " + r.to_string();
  }
  for (auto& n : notes) s += "\nnote: " + n;
  return s;
}

}  // namespace attn
