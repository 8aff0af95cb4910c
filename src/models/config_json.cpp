// Why a callback parse: nlohmann's parser itself is iterative, but the DOM it builds is later
// printed, compared and copied by recursive code. Stopping at kMaxConfigDepth while parsing keeps
// every later walk shallow, and the callback also tells us which field a failure was in.
#include "models/config_json.hpp"

#include <vector>

#include "attn/error.hpp"

namespace attn::models {
namespace {

using nlohmann::json;

std::string dotted(const std::vector<std::string>& path) {
  std::string out;
  for (const auto& p : path) out += (out.empty() ? "" : ".") + p;
  return out;
}

}  // namespace

std::string clip(const std::string& s, std::size_t max) { return s.size() <= max ? s : s.substr(0, max) + "..."; }

std::string preview(const json& v) {
  switch (v.type()) {
    case json::value_t::array: return "a list of " + std::to_string(v.size()) + " entries";
    case json::value_t::object: return "an object of " + std::to_string(v.size()) + " fields";
    case json::value_t::string: {
      const std::string text = clip(v.get_ref<const std::string&>());
      return "\"" + text + "\"";
    }
    default: return v.dump(-1, ' ', false, json::error_handler_t::replace);
  }
}

json parse_config_json(const std::string& text, const std::string& model) {
  if (text.size() > kMaxConfigBytes) {
    throw Error("model '" + model + "': config size " + std::to_string(text.size()) + " bytes invalid: expected at most " +
                std::to_string(kMaxConfigBytes) + " bytes");
  }
  // path[d] is the key last seen at depth d+1: the field a failing value belongs to.
  std::vector<std::string> path;
  auto track = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key) {
      path.resize(std::size_t(depth));
      if (depth > 0) path.back() = clip(parsed.get_ref<const std::string&>());
    } else if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
               depth >= kMaxConfigDepth) {
      throw Error("model '" + model + "': config field '" + dotted(path) + "' nests deeper than " +
                  std::to_string(kMaxConfigDepth) + " levels: expected a plain config.json");
    }
    return true;
  };
  try {
    return json::parse(text, track);
  } catch (const json::exception& e) {
    const std::string where = path.empty() ? "" : " (in field '" + dotted(path) + "')";
    throw Error("model '" + model + "': config is not valid JSON" + where + ": " + e.what());
  }
}

}  // namespace attn::models
