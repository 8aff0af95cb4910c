// JSON renderings of capabilities, backends, candidates, configs and decisions: the one source
// for `attn backends`, `attn select`/`plan` JSON, logs and Python's to_dict().
#include "select/json.hpp"

#include <functional>

namespace attn {
namespace detail {
void layer_config_fields(const LayerConfig& c, const std::function<void(const char*, const std::string&, char)>& f);

namespace {
template <typename T>
nlohmann::json names(const std::vector<T>& values) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& v : values) out.push_back(std::string(to_string(v)));
  return out;
}

/// null: the backend's kv_layout serves every cache.
nlohmann::json layout_rule_json(const std::optional<KVLayoutRule>& r) {
  if (!r) return nullptr;
  return {{"q_dtypes", names(r->q_dtypes)}, {"storage_dtypes", names(r->storage_dtypes)},
          {"otherwise", std::string(to_string(r->otherwise))}, {"cpu_features", names(r->cpu_features)}};
}
}  // namespace

nlohmann::json json_of(const Capabilities& c) {
  nlohmann::json features = nlohmann::json::array();
  for (auto [name, on] : capability_flags(c))
    if (on) features.push_back(std::string(name));
  nlohmann::json j{{"platforms", names(c.platforms)},
                   {"dtypes", names(c.dtypes)},
                   {"kv_cache_dtypes", names(c.kv_cache_dtypes)},
                   {"head_sizes", c.head_sizes.describe()},
                   {"block_sizes", c.block_sizes.describe()},
                   {"attn_types", names(c.attn_types)},
                   {"features", features},
                   {"required_cpu_features", names(c.required_cpu_features)}};
  if (c.min_cc) j["min_compute_capability"] = c.min_cc->to_string();
  if (c.max_cc) j["max_compute_capability"] = c.max_cc->to_string();
  return j;
}

nlohmann::json json_of(const BackendDescriptor& d, const Platform& p) {
  return {{"name", d.name}, {"summary", d.summary}, {"priority", d.priority},
          {"preferred_block_size", d.preferred_block_size}, {"kv_layout", std::string(to_string(d.kv_layout))},
          {"kv_layout_rule", layout_rule_json(d.kv_layout_rule)}, {"module", d.module},
          {"variant", d.variant ? d.variant(p, LayerConfig{}) : std::string()}, {"capabilities", json_of(d.caps)}};
}

nlohmann::json json_of(const Candidate& c) {
  nlohmann::json reasons = nlohmann::json::array();
  for (const Reason& r : c.reasons) reasons.push_back({{"field", r.field.name()}, {"value", r.value}, {"expected", r.expected}});
  return {{"backend", c.backend}, {"valid", c.valid}, {"priority", c.priority}, {"reasons", reasons}};
}

nlohmann::json json_of(const LayerConfig& c) {
  nlohmann::json j = nlohmann::json::object();
  layer_config_fields(c, [&](const char* name, const std::string& text, char kind) {
    if (kind == 'b') j[name] = (text == "true");
    else if (kind == 'n') j[name] = nlohmann::json::parse(text);
    else j[name] = text;
  });
  return j;
}

nlohmann::json json_of(const Decision& d) {
  nlohmann::json candidates = nlohmann::json::array();
  for (const Candidate& c : d.candidates) candidates.push_back(json_of(c));
  return {{"backend", d.backend}, {"variant", d.variant}, {"platform", d.platform}, {"forced_by", d.forced_by},
          {"block_size", d.block_size}, {"block_size_from_user", d.block_size_from_user}, {"tuned", d.tuned},
          {"config", d.config ? json_of(*d.config) : nlohmann::json()}, {"candidates", candidates}, {"notes", d.notes}, {"slow_path", d.slow_path}};
}

}  // namespace detail

namespace {
// A plugin's summary or name may hold bytes that are not UTF-8 (a descriptor is the plugin's own
// data): they print as U+FFFD instead of throwing nlohmann's type_error out of to_json.
std::string dump_text(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }
}  // namespace

std::string to_json(const Capabilities& caps) { return dump_text(detail::json_of(caps)); }
std::string to_json(const BackendDescriptor& backend, const Platform& platform) { return dump_text(detail::json_of(backend, platform)); }
std::string to_json(const Candidate& candidate) { return dump_text(detail::json_of(candidate)); }
std::string to_json(const Decision& decision) { return dump_text(detail::json_of(decision)); }
std::string Decision::to_json() const { return attn::to_json(*this); }
std::string layer_config_json(const LayerConfig& c) { return dump_text(detail::json_of(c)); }

}  // namespace attn
