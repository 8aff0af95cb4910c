// A warmed-up run() with a workspace the plan sized allocates nothing: cpu_flash decode (split
// KV ranges and merges), prefill (the packed-tile path), a mixed batch, and the reference.
// Allocations are counted on every thread (the OpenMP workers included) by the replacement
// operator new of counting_new.cpp.
#include <gtest/gtest.h>

#include <vector>

#include "allocations/counting_new.hpp"
#include "step/step_fixture.hpp"

namespace attn::test {
namespace {

struct Step {
  const char* name;
  std::vector<SeqShape> seqs;
  bool alibi = false;  // ALiBi keeps prefill items on the general kernel (no packed tiles)
};

// bf16 q and cache, head 128, GQA 4: the shapes the production kernels are tuned for.
CaseSpec spec_for(const Step& step) {
  CaseSpec s;
  s.config.num_heads = 16, s.config.num_kv_heads = 4, s.config.head_size = 128;
  s.config.dtype = DType::bfloat16;
  s.seqs = step.seqs;
  s.config.use_alibi = step.alibi;
  s.block_size = 64;
  s.seed = 7;
  return s;
}

const Step kSteps[] = {
    {"decode", {{3000, 1}, {17, 1}, {1500, 1}, {64, 1}}},       // split KV ranges, partials and merges
    {"prefill", {{0, 300}, {0, 129}}},                           // packed tiles
    {"mixed", {{0, 200}, {400, 64}, {2100, 1}, {9, 1}}},         // prefill, chunked prefill, decode
    {"general_kernel", {{0, 150}, {300, 40}, {1200, 1}}, true},  // the general item kernel's scratch
};

class RunAllocations : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(RunAllocations, WarmRunWithWorkspaceAllocatesNothing) {
  const auto& [backend, step_index] = GetParam();
  const Step& step = kSteps[step_index];
  Case c = make_case(spec_for(step), backend);
  const auto plan = c.impl->plan(c.md, c.cache->spec());
  // On AVX-512 the prefill step takes the packed-tile path: its workspace is the packed K/V.
  if (backend == "cpu_flash" && std::string(step.name) == "prefill" && c.impl->variant().rfind("avx512", 0) == 0) {
    EXPECT_GT(plan->workspace_bytes(), 0u) << plan->to_string();
  }
  Workspace ws(plan->workspace_bytes());
  ForwardArgs args = args_for(c, c.out, &ws);
  c.impl->run(*plan, args);  // warm-up: OpenMP team, per-thread kernel scratch grown once
  const int64_t n = allocations_of([&] {
    for (int i = 0; i < 3; ++i) c.impl->run(*plan, args);
  });
  EXPECT_EQ(n, 0) << backend << " " << step.name << ": allocations in 3 warm runs; " << c.spec.describe();
  EXPECT_TRUE(compare_output(c, reference_attention(c)).ok) << "the runs counted must be correct runs";
}

std::string step_name(const ::testing::TestParamInfo<std::tuple<std::string, int>>& p) {
  return std::get<0>(p.param) + "_" + kSteps[std::get<1>(p.param)].name;
}

INSTANTIATE_TEST_SUITE_P(Steps, RunAllocations,
                         ::testing::Combine(::testing::Values("cpu_flash", "reference"), ::testing::Values(0, 1, 2, 3)),
                         step_name);

// Writing the step's new K/V inside run() allocates nothing either: the slots were checked
// (range, distinct) once when the plan validated the metadata.
TEST(RunAllocationsNewKV, WarmRunWritingNewKVAllocatesNothing) {
  Case c = make_case(spec_for(kSteps[2]), "cpu_flash");
  const auto plan = c.impl->plan(c.md, c.cache->spec());
  Workspace ws(plan->workspace_bytes());
  const LayerConfig& cfg = c.params.config;
  Buffer k(DType::bfloat16, {c.md.num_tokens, cfg.num_kv_heads, cfg.head_size});
  Buffer v(DType::bfloat16, {c.md.num_tokens, cfg.num_kv_heads, cfg.head_size});
  for (int64_t i = 0; i < k.view().numel(); ++i) store_from_float(k.data(), k.dtype(), i, 0.25f), store_from_float(v.data(), v.dtype(), i, -0.5f);
  ForwardArgs args = args_for(c, c.out, &ws);
  args.new_k = k.view(), args.new_v = v.view();
  c.impl->run(*plan, args);
  const int64_t n = allocations_of([&] {
    for (int i = 0; i < 3; ++i) c.impl->run(*plan, args);
  });
  EXPECT_EQ(n, 0) << "allocations in 3 warm runs writing new K/V; " << c.spec.describe();
  // The last token's slot holds the written values.
  const PagedKV kv = c.cache->view();
  const int64_t slot = c.md.slot_mapping.back();
  const int64_t b = slot / kv.block_size, t = slot % kv.block_size;
  EXPECT_EQ(load_as_float(kv.base, kv.dtype, kv_element_offset(kv, b, t, 0, 0, false)), 0.25f);
  EXPECT_EQ(load_as_float(kv.base, kv.dtype, kv_element_offset(kv, b, t, 0, 0, true)), -0.5f);
}

// The counter sees the library's allocations: the one-call forward() plans (a shared plan
// object, a copy of the metadata) and allocates its own scratch.
TEST(RunAllocationsCounter, CountsTheLibrarysAllocations) {
  Case c = make_case(spec_for(kSteps[0]), "cpu_flash");
  c.impl->forward(c.q.view(), *c.cache, c.md, c.out.view());
  EXPECT_GT(allocations_of([&] { c.impl->forward(c.q.view(), *c.cache, c.md, c.out.view()); }), 0);
  EXPECT_EQ(allocations_of([] {}), 0);
}

}  // namespace
}  // namespace attn::test
