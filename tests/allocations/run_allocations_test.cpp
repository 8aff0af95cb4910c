// A warmed-up run() with a workspace the plan sized allocates nothing, on every registered CPU
// attention backend: decode (split KV ranges and merges), prefill (cpu_flash's packed tiles, the
// latent tiles), a mixed batch, and cpu_flash's general item kernel. Allocations are counted on
// every thread (the OpenMP workers included) by the replacement operator new of counting_new.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "allocations/counting_new.hpp"
#include "step/step_fixture.hpp"
#include "support/mla_reference.hpp"

namespace attn::test {
namespace {

struct Step {
  const char* name;
  std::vector<SeqShape> seqs;
  bool alibi = false;  // ALiBi keeps prefill items on the general kernel (no packed tiles)
};

// bf16 q and cache, head 128, GQA 4: the shapes the production kernels are tuned for (block-sparse:
// Phi-3-small's pattern on the same heads).
CaseSpec spec_for(const Step& step, const BackendDescriptor& d) {
  CaseSpec s;
  s.config.num_heads = 16, s.config.num_kv_heads = 4, s.config.head_size = 128;
  s.config.dtype = DType::bfloat16;
  if (d.caps.block_sparse) s.config.use_block_sparse = true, s.config.bs_block_size = 16, s.config.bs_local_blocks = 2, s.config.bs_vert_stride = 3;
  s.seqs = step.seqs;
  s.config.use_alibi = step.alibi;
  s.block_size = 64;
  s.seed = 7;
  return s;
}

MlaCaseSpec mla_spec_for(const Step& step, const BackendDescriptor& d) {
  MlaCaseSpec s;
  s.backend = d.name;
  s.seqs = step.seqs;
  s.block_size = 64;
  s.seed = 7;
  if (d.caps.sparse) s.topk = 96;
  return s;
}

const Step kSteps[] = {
    {"decode", {{3000, 1}, {17, 1}, {1500, 1}, {64, 1}}},       // split KV ranges, partials and merges
    {"prefill", {{0, 300}, {0, 129}}},                           // packed tiles
    {"mixed", {{0, 200}, {400, 64}, {2100, 1}, {9, 1}}},         // prefill, chunked prefill, decode
    {"general_kernel", {{0, 150}, {300, 40}, {1200, 1}}, true},  // the general item kernel's scratch
};

/// Whether backend `d` serves the step's layer (the latent backends take no ALiBi).
bool serves(const BackendDescriptor& d, const Step& step) {
  if (d.caps.mla) return !step.alibi;
  return evaluate(d, spec_for(step, d).config, detect_cpu()).valid;
}

/// (backend, step) for every CPU backend that serves attention (all registered ones but the
/// attention-free placeholder) and every step whose layer it serves.
std::vector<std::tuple<std::string, int>> served_steps() {
  std::vector<std::tuple<std::string, int>> out;
  for (auto& d : Registry::instance().backends()) {
    const auto& p = d->caps.platforms;
    if (d->caps.attention_free || std::find(p.begin(), p.end(), PlatformKind::cpu) == p.end()) continue;
    for (int i = 0; i < int(std::size(kSteps)); ++i)
      if (serves(*d, kSteps[i])) out.emplace_back(d->name, i);
  }
  return out;
}

/// One backend's case for a step, whichever kind of layer it serves, with a planned run.
struct Prepared {
  std::optional<Case> dense;
  std::optional<MlaCase> mla;
  AttentionImpl* impl = nullptr;
  std::shared_ptr<const StepPlan> plan;
  ForwardArgs args;
  std::function<CompareResult()> check;  // the last run's output against the fp64 oracle
};

std::unique_ptr<Prepared> prepare(const BackendDescriptor& d, const Step& step) {
  auto p = std::make_unique<Prepared>();
  if (d.caps.mla) {
    p->mla.emplace(make_mla_case(mla_spec_for(step, d)));
    MlaCase& c = *p->mla;
    p->impl = c.impl.get();
    p->plan = c.impl->plan(c.md, c.cache->spec());
    p->args.q = c.q.view(), p->args.out = c.out.view(), p->args.cache = c.cache.get();
    if (c.spec.topk > 0) p->args.topk_indices = TensorView::contiguous(c.topk.data(), DType::int32, {c.md.num_tokens, c.spec.topk});
    p->check = [&c] { return compare_values(tensor_values(c.out), mla_absorbed_reference(c), c.spec.dtype, c.cache->spec().dtype); };
    return p;
  }
  const CaseSpec spec = spec_for(step, d);
  p->dense.emplace(make_case(spec, d.name));
  Case& c = *p->dense;
  p->impl = c.impl.get();
  p->plan = c.impl->plan(c.md, c.cache->spec());
  p->args = args_for(c, c.out, nullptr);
  const bool block_sparse = d.caps.block_sparse;
  p->check = [&c, block_sparse] { return compare_output(c, block_sparse ? blocksparse_reference(c) : reference_attention(c)); };
  return p;
}

class RunAllocations : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(RunAllocations, WarmRunWithWorkspaceAllocatesNothing) {
  const auto& [backend, step_index] = GetParam();
  const Step& step = kSteps[step_index];
  auto d = Registry::instance().find(backend);
  ASSERT_TRUE(d);
  std::unique_ptr<Prepared> p = prepare(*d, step);
  // On AVX-512 the prefill step takes the packed-tile path: its workspace is the packed K/V.
  if (backend == "cpu_flash" && std::string(step.name) == "prefill" && p->impl->variant().rfind("avx512", 0) == 0) {
    EXPECT_GT(p->plan->workspace_bytes(), 0u) << p->plan->to_string();
  }
  Workspace ws(p->plan->workspace_bytes());
  p->args.workspace = &ws;
  p->impl->run(*p->plan, p->args);  // warm-up: OpenMP team, per-thread kernel scratch grown once
  const int64_t n = allocations_of([&] {
    for (int i = 0; i < 3; ++i) p->impl->run(*p->plan, p->args);
  });
  EXPECT_EQ(n, 0) << backend << " " << step.name << ": allocations in 3 warm runs; " << p->plan->to_string();
  const CompareResult r = p->check();
  EXPECT_TRUE(r.ok) << "the runs counted must be correct runs: " << r.message;
}

std::string step_name(const ::testing::TestParamInfo<std::tuple<std::string, int>>& p) {
  return std::get<0>(p.param) + "_" + kSteps[std::get<1>(p.param)].name;
}

INSTANTIATE_TEST_SUITE_P(Steps, RunAllocations,
                         ::testing::ValuesIn(served_steps()),
                         step_name);

// Writing the step's new K/V inside run() allocates nothing either: the slots were checked
// (range, distinct) once when the plan validated the metadata.
TEST(RunAllocationsNewKV, WarmRunWritingNewKVAllocatesNothing) {
  Case c = make_case(spec_for(kSteps[2], *Registry::instance().find("cpu_flash")), "cpu_flash");
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
  Case c = make_case(spec_for(kSteps[0], *Registry::instance().find("cpu_flash")), "cpu_flash");
  c.impl->forward(c.q.view(), *c.cache, c.md, c.out.view());
  EXPECT_GT(allocations_of([&] { c.impl->forward(c.q.view(), *c.cache, c.md, c.out.view()); }), 0);
  EXPECT_EQ(allocations_of([] {}), 0);
}

}  // namespace
}  // namespace attn::test
