// The library's JSON renderings read back: capabilities and backend records, candidates,
// decisions. Every field written comes back equal to the object it was rendered from.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>

#include "attn/backend.hpp"
#include "attn/registry.hpp"
#include "attn/selector.hpp"

namespace {

using namespace attn;
using nlohmann::json;

template <typename T>
std::vector<std::string> names(const std::vector<T>& values) {
  std::vector<std::string> out;
  for (const auto& v : values) out.emplace_back(to_string(v));
  return out;
}

Reason reason_from(const json& j) {
  return {j.at("field").get<std::string>(), j.at("value").get<std::string>(), j.at("expected").get<std::string>()};
}

Candidate candidate_from(const json& j) {
  Candidate c{j.at("backend").get<std::string>(), j.at("valid").get<bool>(), j.at("priority").get<int>(), {}};
  for (const auto& r : j.at("reasons")) c.reasons.push_back(reason_from(r));
  return c;
}

void expect_same(const Candidate& a, const Candidate& b) {
  EXPECT_EQ(a.backend, b.backend);
  EXPECT_EQ(a.valid, b.valid);
  EXPECT_EQ(a.priority, b.priority);
  EXPECT_EQ(a.reasons, b.reasons);
  for (std::size_t i = 0; i < std::min(a.reasons.size(), b.reasons.size()); ++i)
    EXPECT_EQ(a.reasons[i].field.id(), b.reasons[i].field.id());  // the enum survives by name
}

TEST(JsonRender, CapabilitiesOfEveryBackendRoundTrip) {
  const Platform& here = detect_cpu();
  for (const auto& d : Registry::instance().backends()) {
    const json j = json::parse(to_json(*d, here));
    EXPECT_EQ(j.at("name"), d->name);
    EXPECT_EQ(j.at("summary"), d->summary);
    EXPECT_EQ(j.at("priority"), d->priority);
    EXPECT_EQ(j.at("preferred_block_size"), d->preferred_block_size);
    EXPECT_EQ(j.at("kv_layout"), std::string(to_string(d->kv_layout)));
    const json& rule = j.at("kv_layout_rule");
    EXPECT_EQ(rule.is_null(), !d->kv_layout_rule);
    if (d->kv_layout_rule) {
      EXPECT_EQ(rule.at("q_dtypes").get<std::vector<std::string>>(), names(d->kv_layout_rule->q_dtypes));
      EXPECT_EQ(rule.at("storage_dtypes").get<std::vector<std::string>>(), names(d->kv_layout_rule->storage_dtypes));
      EXPECT_EQ(rule.at("otherwise"), std::string(to_string(d->kv_layout_rule->otherwise)));
    }
    EXPECT_EQ(j.at("module"), d->module);
    EXPECT_EQ(j.at("variant"), d->variant ? d->variant(here, LayerConfig{}) : std::string());
    const Capabilities& c = d->caps;
    const json& cj = j.at("capabilities");
    EXPECT_EQ(cj, json::parse(to_json(c)));
    EXPECT_EQ(cj.at("platforms").get<std::vector<std::string>>(), names(c.platforms));
    EXPECT_EQ(cj.at("dtypes").get<std::vector<std::string>>(), names(c.dtypes));
    EXPECT_EQ(cj.at("kv_cache_dtypes").get<std::vector<std::string>>(), names(c.kv_cache_dtypes));
    EXPECT_EQ(cj.at("attn_types").get<std::vector<std::string>>(), names(c.attn_types));
    EXPECT_EQ(cj.at("required_cpu_features").get<std::vector<std::string>>(), names(c.required_cpu_features));
    EXPECT_EQ(cj.at("head_sizes"), c.head_sizes.describe());
    EXPECT_EQ(cj.at("block_sizes"), c.block_sizes.describe());
    std::vector<std::string> on;
    for (auto [name, set] : capability_flags(c))
      if (set) on.emplace_back(name);
    EXPECT_EQ(cj.at("features").get<std::vector<std::string>>(), on) << d->name;
    EXPECT_EQ(cj.contains("min_compute_capability"), c.min_cc.has_value());
    if (c.min_cc) {
      EXPECT_EQ(cj.at("min_compute_capability"), c.min_cc->to_string());
    }
    if (c.max_cc) {
      EXPECT_EQ(cj.at("max_compute_capability"), c.max_cc->to_string());
    }
  }
}

TEST(JsonRender, CapabilityFlagsNameEveryFlagOnce) {
  Capabilities none;
  none.kv_connector = false;
  const json j = json::parse(to_json(none));
  EXPECT_TRUE(j.at("features").empty()) << j.dump();
  std::vector<std::string> seen;
  for (auto [name, on] : capability_flags(none)) {
    EXPECT_FALSE(on) << name;
    EXPECT_EQ(std::count(seen.begin(), seen.end(), std::string(name)), 0) << name;
    seen.emplace_back(name);
  }
  EXPECT_EQ(seen.size(), 14u);
}

TEST(JsonRender, DecisionAndCandidatesRoundTrip) {
  LayerConfig l;
  l.head_size = 72;
  l.dtype = DType::float32;
  l.block_size = 8;
  SelectOptions o;
  o.use_env = false;
  o.platform = parse_platform("cpu:avx2");
  const Decision d = explain(l, o);
  ASSERT_FALSE(d.candidates.empty());
  const json j = json::parse(to_json(d));
  EXPECT_EQ(j, json::parse(d.to_json()));
  EXPECT_EQ(j.at("backend"), d.backend);
  EXPECT_EQ(j.at("variant"), d.variant);
  EXPECT_EQ(j.at("platform"), d.platform);
  EXPECT_EQ(j.at("forced_by"), d.forced_by);
  EXPECT_EQ(j.at("block_size"), d.block_size);
  EXPECT_EQ(j.at("block_size_from_user"), d.block_size_from_user);
  EXPECT_EQ(j.at("tuned"), d.tuned);
  EXPECT_EQ(j.at("notes").get<std::vector<std::string>>(), d.notes);
  EXPECT_EQ(j.at("slow_path"), d.slow_path);
  EXPECT_EQ(j.at("config"), json::parse(layer_config_json(d.config.value())));
  ASSERT_EQ(j.at("candidates").size(), d.candidates.size());
  bool some_reason = false;
  for (std::size_t i = 0; i < d.candidates.size(); ++i) {
    expect_same(candidate_from(j.at("candidates")[i]), d.candidates[i]);
    expect_same(candidate_from(json::parse(to_json(d.candidates[i]))), d.candidates[i]);
    some_reason = some_reason || !d.candidates[i].reasons.empty();
  }
  EXPECT_TRUE(some_reason) << d.to_text();
}

}  // namespace
