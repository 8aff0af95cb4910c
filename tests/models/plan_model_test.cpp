// plan_model(): equal layers grouped with one decision each, layer ranges in one format, the
// tensor-parallel share from shard_model / shard_heads, and its JSON.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "attn/error.hpp"
#include "attn/mamba.hpp"
#include "attn/plan.hpp"
#include "attn/registry.hpp"

namespace {

using namespace attn;
using nlohmann::json;

PlanOptions unforced() {
  PlanOptions o;
  o.select.use_env = false;
  return o;
}

TEST(LayerRanges, CompactAndExact) {
  EXPECT_EQ(layer_ranges({}), "");
  EXPECT_EQ(layer_ranges({5}), "5");
  EXPECT_EQ(layer_ranges({0, 1}), "0,1");
  EXPECT_EQ(layer_ranges({0, 1, 2, 3}), "0-3");
  EXPECT_EQ(layer_ranges({0, 2, 4, 6, 8}), "0,2,4,...,8");
  EXPECT_EQ(layer_ranges({3, 7, 11}), "3,7,11");  // three in steps: listed
  EXPECT_EQ(layer_ranges({1, 2, 3, 5, 9, 10}), "1-3,5,9,10");
}

TEST(PlanModel, EqualLayersShareOneGroup) {
  const ModelSpec llama = load_model("llama-3.1-8b");
  const ModelPlan p = plan_model(llama, parse_platform("cpu:avx2"), unforced());
  ASSERT_EQ(p.groups.size(), 1u);
  const PlanGroup& g = p.groups[0];
  EXPECT_EQ(g.layers.size(), 32u);
  EXPECT_EQ(g.layer_ranges, "0-31");
  EXPECT_TRUE(g.is_attention());
  EXPECT_FALSE(g.decision.backend.empty());
  EXPECT_TRUE(g.error.empty());
  EXPECT_TRUE(p.all_served());
  EXPECT_EQ(p.platform, parse_platform("cpu:avx2").to_string());
  // The group's decision is the selector's for that config on that platform.
  SelectOptions s;
  s.use_env = false;
  s.platform = parse_platform("cpu:avx2");
  EXPECT_EQ(g.decision.backend, explain(g.sample.attention, s).backend);
  EXPECT_EQ(&p.group_of(17), &p.groups[0]);
  EXPECT_THROW(p.group_of(32), Error);
}

TEST(PlanModel, AlternatingLayersMakeTwoGroupsWithSteppedRanges) {
  const ModelPlan p = plan_model(load_model("gemma-2-9b"), parse_platform("cpu:avx2"), unforced());
  ASSERT_EQ(p.groups.size(), 2u);
  EXPECT_EQ(p.groups[0].layer_ranges, "0,2,4,...,40");
  EXPECT_EQ(p.groups[1].layer_ranges, "1,3,5,...,41");
  EXPECT_NE(p.groups[0].sample.attention, p.groups[1].sample.attention);
  for (int i = 0; i < p.model.num_layers; ++i) EXPECT_EQ(&p.group_of(i), &p.groups[std::size_t(i % 2)]) << i;
}

TEST(PlanModel, MixerLayersAreDecidedBySelectMamba) {
  const ModelPlan p = plan_model(load_model("jamba-1.5-mini"), parse_platform("cpu:avx2"), unforced());
  int attention = 0, mixer = 0;
  for (const auto& g : p.groups) {
    (g.is_attention() ? attention : mixer) += int(g.layers.size());
    if (!g.is_attention()) {
      EXPECT_FALSE(g.decision.backend.empty());
      MambaSelectOptions m;
      m.platform = parse_platform("cpu:avx2");
      EXPECT_EQ(g.decision.backend, select_mamba(g.sample.mixer, m).backend);
    }
  }
  EXPECT_EQ(attention + mixer, p.model.num_layers);
  EXPECT_GT(mixer, 0);
}

TEST(PlanModel, TensorParallelPlansOneRanksShare) {
  PlanOptions o = unforced();
  o.tensor_parallel = 4;
  o.pipeline_parallel = 2;
  const ModelSpec llama = load_model("llama-3.1-8b");
  const ModelPlan p = plan_model(llama, parse_platform("cpu:avx2"), o);
  ASSERT_EQ(p.groups.size(), 1u);
  const PlanGroup& g = p.groups[0];
  EXPECT_EQ(g.whole.attention.num_heads, 32);
  EXPECT_EQ(g.sample.attention.num_heads, 8);
  EXPECT_EQ(g.sample.attention.num_kv_heads, 2);
  EXPECT_EQ(g.sharding.num_heads, shard_heads(llama.layers[0].attention, 4).num_heads);
  EXPECT_EQ(g.decision.config, g.sample.attention);  // the rank's share is what was decided
  ASSERT_EQ(p.stages.size(), 2u);
  EXPECT_EQ(p.stages[1].end, 32);
  EXPECT_EQ(p.rank_model.layers[5].attention, shard_layer_config(llama.layers[5].attention, 4));
  o.tensor_parallel = 3;
  EXPECT_THROW(plan_model(llama, parse_platform("cpu:avx2"), o), Error);
}

TEST(PlanModel, ForcedBackendThatCannotServeNamesModelLayerAndRanges) {
  PlanOptions o = unforced();
  o.select.backend = "no_attention";
  try {
    plan_model(load_model("llama-3.1-8b"), parse_platform("cpu:avx2"), o);
    ADD_FAILURE() << "no_attention planned a llama layer";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("layers 0-31 of llama-3.1-8b: ", 0), 0u) << msg;
    EXPECT_NE(msg.find("Selected backend no_attention"), std::string::npos) << msg;
  }
}

TEST(PlanModel, JsonHasEveryGroupWithItsRangesAndDecision) {
  PlanOptions o = unforced();
  o.tensor_parallel = 2;
  const ModelPlan p = plan_model(load_model("gemma-2-9b"), parse_platform("cpu:avx2"), o);
  const json j = json::parse(to_json(p));
  EXPECT_EQ(j.at("model"), p.model.name);
  EXPECT_EQ(j.at("num_layers"), p.model.num_layers);
  EXPECT_EQ(j.at("tensor_parallel"), 2);
  EXPECT_EQ(j.at("pipeline_parallel"), 1);
  ASSERT_EQ(j.at("groups").size(), p.groups.size());
  for (std::size_t i = 0; i < p.groups.size(); ++i) {
    const json& g = j.at("groups")[i];
    const PlanGroup& want = p.groups[i];
    EXPECT_EQ(g.at("layers").get<std::vector<int>>(), want.layers);
    EXPECT_EQ(g.at("layer_ranges"), want.layer_ranges);
    EXPECT_EQ(g.at("kind"), "attention");
    EXPECT_EQ(g.at("backend"), want.decision.backend);
    EXPECT_EQ(g.at("block_size"), want.decision.block_size);
    EXPECT_EQ(g.at("config"), json::parse(layer_config_json(want.sample.attention)));
    EXPECT_EQ(g.at("candidates"), json::parse(to_json(want.decision)).at("candidates"));
    EXPECT_EQ(g.at("sharding").at("num_heads"), want.sharding.num_heads);
    EXPECT_EQ(g.at("sharding").at("total_num_heads"), want.whole.attention.num_heads);
  }
  ASSERT_EQ(j.at("stages").size(), 1u);
  EXPECT_EQ(j.at("stages")[0].at("layers"), json::array({0, p.model.num_layers}));
}

// What `attn plan` prints for a layer is what runs it: the decision's variant equals the one the
// implementation built for that layer reports (cpu_mla's bf16-dot build, say, serves bf16 latent
// caches only, so a float32 DeepSeek layer is planned and run on the avx512 one).
TEST(PlanModel, PlannedVariantIsTheOneThatRuns) {
  int checked = 0;
  for (const std::string& name : builtin_models())
    for (DType dtype : {DType::float32, DType::float16, DType::bfloat16}) {
      ModelOverrides ov;
      ov.dtype = dtype;
      const ModelPlan plan = plan_model(load_model(name, ov), detect_cpu(), unforced());
      for (const PlanGroup& g : plan.groups) {
        if (!g.is_attention() || g.decision.backend.empty()) continue;
        const auto desc = Registry::instance().find(g.decision.backend);
        if (!desc || !desc->create) continue;
        LayerParams p;
        p.config = g.sample.attention;
        p.config.block_size = g.decision.block_size;
        p.scale = g.sample.softmax_scale;
        if (p.config.has_sink) p.sinks.assign(std::size_t(p.config.num_heads), 0.0f);
        const auto impl = Registry::instance().create(g.decision.backend, p);
        EXPECT_EQ(g.decision.variant, impl->variant())
            << name << " " << to_string(dtype) << " layers " << g.layer_ranges << " on " << g.decision.backend;
        ++checked;
      }
    }
  EXPECT_GT(checked, 40);
}

}  // namespace
