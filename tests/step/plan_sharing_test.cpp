// One plan serves every layer of a step: layers with equal configs but their own caches,
// activations and weights get from a shared plan exactly what their own forward() gives. A plan
// made for another backend, config or cache geometry is refused with an attn::Error naming it.
#include <gtest/gtest.h>

#include "step/step_fixture.hpp"
#include "support/expect_error.hpp"

namespace attn::test {
namespace {

class PlanSharing : public ::testing::TestWithParam<std::string> {};

TEST_P(PlanSharing, OnePlanServesLayersWithTheirOwnCachesAndWeights) {
  Case l0 = make_case(step_layer_spec(0), GetParam()), l1 = make_case(step_layer_spec(1), GetParam());
  ASSERT_EQ(l0.md.block_table, l1.md.block_table) << "the fixture must give both layers one block table";
  ASSERT_EQ(l0.md.seq_lens, l1.md.seq_lens);
  run_forward(l0);
  run_forward(l1);
  const Buffer want0 = copy_of(l0.out), want1 = copy_of(l1.out);
  ASSERT_FALSE(same_bits(want0, want1)) << "the layers must differ for the test to mean anything";

  const auto plan = l0.impl->plan(l0.md, l0.cache->spec());
  Workspace ws(plan->workspace_bytes());
  Buffer out0(l0.out.dtype(), l0.out.shape()), out1(l1.out.dtype(), l1.out.shape());
  // Layer 1 first, then layer 0, through one workspace: nothing carries over between layers.
  l1.impl->run(*plan, args_for(l1, out1, &ws));
  l0.impl->run(*plan, args_for(l0, out0, &ws));
  EXPECT_TRUE(same_bits(out0, want0)) << l0.spec.describe();
  EXPECT_TRUE(same_bits(out1, want1)) << l1.spec.describe();
  // No workspace: the run allocates its own scratch, with the same result.
  l1.impl->run(*plan, args_for(l1, out1, nullptr));
  EXPECT_TRUE(same_bits(out1, want1)) << l1.spec.describe();
}

TEST_P(PlanSharing, PlanOfAnotherConfigIsRefused) {
  Case l0 = make_case(step_layer_spec(0), GetParam());
  CaseSpec other = step_layer_spec(0);
  other.config.num_kv_heads = 4;
  Case l2 = make_case(other, GetParam());
  const auto foreign = l2.impl->plan(l2.md, l2.cache->spec());
  Buffer out(l0.out.dtype(), l0.out.shape());
  EXPECT_TRUE(throws_error([&] { l0.impl->run(*foreign, args_for(l0, out, nullptr)); },
                           {"plan.config", "num_kv_heads=4", "this layer's config", "plans are shared only by equal configs"}));
}

TEST_P(PlanSharing, PlanOfAnotherCacheGeometryIsRefused) {
  Case l0 = make_case(step_layer_spec(0), GetParam());
  KVCacheSpec bigger = l0.cache->spec();
  bigger.num_blocks += 8;
  const auto plan = l0.impl->plan(l0.md, bigger);  // valid metadata for the bigger pool
  Buffer out(l0.out.dtype(), l0.out.shape());
  EXPECT_TRUE(throws_error([&] { l0.impl->run(*plan, args_for(l0, out, nullptr)); },
                           {"cache=", "the geometry the plan was made for", std::to_string(bigger.num_blocks)}));
  // And the other way round: a layer whose cache differs from the one the plan was made for.
  KVCache other(bigger);
  ForwardArgs a = args_for(l0, out, nullptr);
  a.cache = &other;
  const auto own = l0.impl->plan(l0.md, l0.cache->spec());
  EXPECT_TRUE(throws_error([&] { l0.impl->run(*own, a); }, {"cache=", "the geometry the plan was made for"}));
}

INSTANTIATE_TEST_SUITE_P(Backends, PlanSharing, ::testing::Values("cpu_flash", "reference"));

TEST(PlanRefusal, PlanOfAnotherBackendIsRefused) {
  Case flash = make_case(step_layer_spec(0), "cpu_flash");
  Case ref = make_case(step_layer_spec(0), "reference");
  // Same config; the reference's plan (its own cache layout) on a cpu_flash layer.
  const auto plan = ref.impl->plan(ref.md, ref.cache->spec());
  Buffer out(flash.out.dtype(), flash.out.shape());
  EXPECT_TRUE(throws_error([&] { flash.impl->run(*plan, args_for(flash, out, nullptr)); },
                           {"plan.backend=reference", "a plan made by cpu_flash"}));
}

TEST(StepPlanText, PlanPrintsTheStep) {
  Case l0 = make_case(step_layer_spec(0), "cpu_flash");
  const auto plan = l0.impl->plan(l0.md, l0.cache->spec());
  const std::string text = plan->to_string();
  EXPECT_NE(text.find("cpu_flash plan"), std::string::npos) << text;
  EXPECT_NE(text.find("workspace " + std::to_string(plan->workspace_bytes()) + " bytes"), std::string::npos) << text;
  EXPECT_GT(plan->workspace_bytes(), 0u) << "a step with a 1100-token decode splits its KV range: partials";
}

}  // namespace
}  // namespace attn::test
