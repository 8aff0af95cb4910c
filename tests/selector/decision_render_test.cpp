// Decision rendering: the text form names the winner, every candidate and its reasons; the JSON
// form parses with nlohmann and follows the schema the CLI and Python rely on.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "attn/attn.hpp"
#include "selector/selector_test_util.hpp"

namespace {

using namespace attn;
using nlohmann::json;

struct Rendered : ::testing::Test {
  int hs = test::kSyntheticHeadBase + 400;
  test::TestRegistry reg;
  std::string picky;
  LayerConfig cfg;
  Decision d;
  void SetUp() override {
    Capabilities caps = test::synthetic_caps(hs);
    caps.dtypes = {DType::bfloat16};
    caps.sinks = false;
    picky = reg.add_synthetic("render", caps, 1);
    cfg = test::synthetic_layer(hs);
    cfg.has_sink = true;
    cfg.logits_soft_cap = 12.5f;
    cfg.block_size = 32;
    SelectOptions o = reg.options();
    o.use_env = false;
    o.backend = "reference";
    d = select(cfg, o);
  }
};

TEST_F(Rendered, TextNamesWinnerCandidatesAndReasons) {
  const std::string t = d.to_text();
  EXPECT_EQ(t.rfind("backend: reference (forced by argument)\n", 0), 0u) << t;
  EXPECT_NE(t.find("\nplatform: " + detect_cpu().to_string() + "\n"), std::string::npos) << t;
  EXPECT_NE(t.find("\nlayer: " + cfg.to_string() + "\n"), std::string::npos) << t;
  EXPECT_NE(t.find("\nblock_size: 32 (user)\n"), std::string::npos) << t;
  EXPECT_NE(t.find("\n  * reference (priority 1000): valid"), std::string::npos) << t;
  EXPECT_NE(t.find("\n    " + picky + " (priority 1): invalid\n      - dtype=float32, expected one of bfloat16\n"
                   "      - has_sink=true, expected false (no attention sinks)"),
            std::string::npos)
      << t;
}

TEST_F(Rendered, TextShowsTheVariantWhenThereIsOne) {
  Decision v = d;
  v.variant = "avx512";
  EXPECT_EQ(v.to_text().rfind("backend: reference [avx512] (forced by argument)", 0), 0u);
  v.block_size_from_user = false;
  EXPECT_NE(v.to_text().find("(backend's preferred)"), std::string::npos);
}

TEST_F(Rendered, JsonFollowsTheSchema) {
  const json j = json::parse(d.to_json());
  ASSERT_TRUE(j.is_object());
  for (const char* key : {"backend", "variant", "platform", "forced_by", "block_size", "block_size_from_user", "config",
                          "candidates", "notes"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["backend"], "reference");
  EXPECT_TRUE(j["variant"].is_string());
  EXPECT_EQ(j["platform"], detect_cpu().to_string());
  EXPECT_EQ(j["forced_by"], "argument");
  EXPECT_EQ(j["block_size"], 32);
  EXPECT_EQ(j["block_size_from_user"], true);
  EXPECT_TRUE(j["notes"].is_array());

  ASSERT_TRUE(j["candidates"].is_array());
  ASSERT_EQ(j["candidates"].size(), d.candidates.size());
  for (std::size_t i = 0; i < d.candidates.size(); ++i) {
    const json& c = j["candidates"][i];
    ASSERT_TRUE(c["backend"].is_string());
    ASSERT_TRUE(c["valid"].is_boolean());
    ASSERT_TRUE(c["priority"].is_number_integer());
    ASSERT_TRUE(c["reasons"].is_array());
    EXPECT_EQ(c["backend"], d.candidates[i].backend);
    EXPECT_EQ(c["valid"], d.candidates[i].valid);
    EXPECT_EQ(c["priority"], d.candidates[i].priority);
    ASSERT_EQ(c["reasons"].size(), d.candidates[i].reasons.size());
    for (std::size_t r = 0; r < d.candidates[i].reasons.size(); ++r) {
      EXPECT_EQ(c["reasons"][r]["field"], d.candidates[i].reasons[r].field.name());
      EXPECT_EQ(c["reasons"][r]["value"], d.candidates[i].reasons[r].value);
      EXPECT_EQ(c["reasons"][r]["expected"], d.candidates[i].reasons[r].expected);
    }
  }
}

TEST_F(Rendered, JsonConfigHasEveryFieldWithItsType) {
  const json c = json::parse(d.to_json())["config"];
  ASSERT_TRUE(c.is_object());
  EXPECT_EQ(c.size(), 30u) << "one entry per LayerConfig field";
  EXPECT_EQ(c["bs_head_sliding_step"], 0);
  EXPECT_EQ(c["num_heads"], cfg.num_heads);
  EXPECT_EQ(c["num_kv_heads"], cfg.num_kv_heads);
  EXPECT_EQ(c["head_size"], hs);
  EXPECT_EQ(c["head_size_v"], 0);
  EXPECT_EQ(c["dtype"], "float32");
  EXPECT_EQ(c["kv_cache_dtype"], "auto");
  EXPECT_EQ(c["attn_type"], "decoder");
  EXPECT_EQ(c["block_size"], 32);
  EXPECT_DOUBLE_EQ(c["logits_soft_cap"].get<double>(), 12.5);
  EXPECT_EQ(c["has_sink"], true);
  EXPECT_EQ(c["use_mla"], false);
  for (auto& [key, value] : c.items()) {
    if (key.rfind("use_", 0) == 0 || key.rfind("is_", 0) == 0 || key.rfind("has_", 0) == 0)
      EXPECT_TRUE(value.is_boolean()) << key;
    else if (key == "dtype" || key == "kv_cache_dtype" || key == "attn_type")
      EXPECT_TRUE(value.is_string()) << key;
    else
      EXPECT_TRUE(value.is_number()) << key;
  }
  EXPECT_EQ(json::parse(layer_config_json(cfg)), c);
}

TEST_F(Rendered, JsonOfANoteAndOfNoValidBackend) {
  LayerConfig none = cfg;
  none.kv_cache_dtype = KVCacheDType::nvfp4;
  none.use_mm_prefix = true;
  SelectOptions o = reg.options();
  o.use_env = false;
  const json j = json::parse(explain(none, o).to_json());
  EXPECT_EQ(j["backend"], "");
  EXPECT_EQ(j["forced_by"], "");
  for (auto& c : j["candidates"]) {
    EXPECT_EQ(c["valid"], false);
    EXPECT_FALSE(c["reasons"].empty());
  }
}

}  // namespace
