// evaluate(): the one checker the selector, `attn check` and the conformance generator ask.
// Each reason it can give (generic, extra, module), their fixed order, the ReasonField names.
#include <gtest/gtest.h>

#include <functional>

#include "attn/backend.hpp"
#include "attn/registry.hpp"
#include "attn/selector.hpp"
#include "selector/permissive_caps.hpp"

namespace {

using namespace attn;

// Serves the default layer on cpu and cuda; each case takes one thing away.
BackendDescriptor permissive() {
  BackendDescriptor d;
  d.name = "eval_permissive";
  d.priority = 7;
  d.caps = test::permissive_caps();
  return d;
}

const Platform& cpu() {
  static const Platform p = parse_platform("cpu:avx2");
  return p;
}

struct Case {
  ReasonField field;
  std::function<void(BackendDescriptor&, LayerConfig&)> take_away;
  Platform platform = cpu();
};

std::vector<Case> one_reason_each() {
  using F = ReasonField;
  const Platform cuda75 = parse_platform("cuda:7.5");
  return {
      {F::platform, [](BackendDescriptor& d, LayerConfig&) { d.caps.platforms = {PlatformKind::cuda}; }},
      {F::head_size, [](BackendDescriptor& d, LayerConfig&) { d.caps.head_sizes = SizeRule::one_of({64}); }},
      {F::head_size_v, [](BackendDescriptor& d, LayerConfig& l) { d.caps.distinct_head_size_v = false, l.head_size_v = 64; }},
      {F::dtype, [](BackendDescriptor& d, LayerConfig&) { d.caps.dtypes = {DType::float32}; }},
      {F::kv_cache_dtype, [](BackendDescriptor& d, LayerConfig& l) { d.caps.kv_cache_dtypes = {KVCacheDType::auto_}, l.kv_cache_dtype = KVCacheDType::fp8; }},
      {F::block_size, [](BackendDescriptor& d, LayerConfig& l) { d.caps.block_sizes = SizeRule::one_of({16}), l.block_size = 8; }},
      {F::use_mm_prefix, [](BackendDescriptor& d, LayerConfig& l) { d.caps.mm_prefix = false, l.use_mm_prefix = true; }},
      {F::use_mla, [](BackendDescriptor& d, LayerConfig&) { d.caps.mla = true; }},
      {F::has_sink, [](BackendDescriptor& d, LayerConfig& l) { d.caps.sinks = false, l.has_sink = true; }},
      {F::use_sparse, [](BackendDescriptor& d, LayerConfig&) { d.caps.sparse = true; }},
      {F::use_block_sparse, [](BackendDescriptor& d, LayerConfig&) { d.caps.block_sparse = true; }},
      {F::is_attention_free, [](BackendDescriptor& d, LayerConfig&) { d.caps.attention_free = true; }},
      {F::use_per_head_quant_scales, [](BackendDescriptor& d, LayerConfig& l) { d.caps.per_head_quant_scales = false, l.use_per_head_quant_scales = true; }},
      {F::compute_capability, [](BackendDescriptor& d, LayerConfig&) { d.caps.min_cc = ComputeCapability{8, 0}; }, cuda75},
      {F::cpu_features, [](BackendDescriptor& d, LayerConfig&) { d.caps.required_cpu_features = {CpuFeature::amx_tile}; }},
      {F::attn_type, [](BackendDescriptor& d, LayerConfig& l) { d.caps.attn_types = {AttnType::decoder}, l.attn_type = AttnType::encoder; }},
      {F::sliding_window, [](BackendDescriptor& d, LayerConfig& l) { d.caps.sliding_window = false, l.sliding_window = 128; }},
      {F::logits_soft_cap, [](BackendDescriptor& d, LayerConfig& l) { d.caps.soft_cap = false, l.logits_soft_cap = 30.0f; }},
      {F::use_alibi, [](BackendDescriptor& d, LayerConfig& l) { d.caps.alibi = false, l.use_alibi = true; }},
      {F::use_non_causal, [](BackendDescriptor& d, LayerConfig& l) { d.caps.non_causal = false, l.use_non_causal = true; }},
      {F::use_batch_invariant, [](BackendDescriptor& d, LayerConfig& l) { d.caps.batch_invariance = false, l.use_batch_invariant = true; }},
      {F::use_kv_connector, [](BackendDescriptor& d, LayerConfig& l) { d.caps.kv_connector = false, l.use_kv_connector = true; }},
  };
}

TEST(Evaluate, PermissiveBackendIsAValidCandidate) {
  const Candidate c = evaluate(permissive(), LayerConfig{}, cpu());
  EXPECT_TRUE(c.valid);
  EXPECT_TRUE(c.reasons.empty());
  EXPECT_TRUE(c.on_platform());
  EXPECT_EQ(c.backend, "eval_permissive");
  EXPECT_EQ(c.priority, 7);
}

TEST(Evaluate, EachGenericReasonAloneWithItsName) {
  for (const Case& k : one_reason_each()) {
    BackendDescriptor d = permissive();
    LayerConfig l;
    k.take_away(d, l);
    const Candidate c = evaluate(d, l, k.platform);
    ASSERT_EQ(c.reasons.size(), 1u) << to_string(k.field);
    EXPECT_FALSE(c.valid);
    EXPECT_EQ(c.reasons[0].field, k.field) << c.reasons[0].to_string();
    EXPECT_EQ(c.reasons[0].field.name(), to_string(k.field));  // the user-visible name, from the one table
    EXPECT_EQ(c.reasons[0].to_string().rfind(std::string(to_string(k.field)) + "=", 0), 0u) << c.reasons[0].to_string();
    EXPECT_EQ(c.on_platform(), k.field != ReasonField::platform);
  }
}

TEST(Evaluate, GenericReasonsComeInFieldOrderThenExtraChecks) {
  BackendDescriptor d = permissive();
  d.caps.head_sizes = SizeRule::one_of({64});
  d.caps.dtypes = {DType::float16};
  d.caps.sinks = d.caps.alibi = false;
  d.caps.kv_connector = false;
  d.extra_checks = [](const LayerConfig& c, const Platform&) {
    return std::vector<Reason>{{"index_topk", std::to_string(c.index_topk), "> 0"}};
  };
  LayerConfig l;
  l.head_size = 80;
  l.dtype = DType::float32;
  l.has_sink = l.use_alibi = l.use_kv_connector = true;
  const Candidate c = evaluate(d, l, cpu());
  ASSERT_EQ(c.reasons.size(), 6u);
  for (std::size_t i = 1; i + 1 < c.reasons.size(); ++i)
    EXPECT_LT(int(c.reasons[i - 1].field.id()), int(c.reasons[i].field.id())) << c.reasons[i].to_string();
  EXPECT_EQ(c.reasons.back().field, ReasonField::other);  // a field only the backend's own check knows
  EXPECT_EQ(c.reasons.back().field, "index_topk");
}

TEST(Evaluate, ExtraChecksDoNotRunForAnotherPlatform) {
  BackendDescriptor d = permissive();
  d.caps.platforms = {PlatformKind::cuda};
  int calls = 0;
  d.extra_checks = [&](const LayerConfig&, const Platform&) {
    ++calls;
    return std::vector<Reason>{{"kv_lora_rank", "0", "> 0"}};
  };
  const Candidate c = evaluate(d, LayerConfig{}, cpu());
  ASSERT_EQ(c.reasons.size(), 1u);
  EXPECT_EQ(c.reasons[0].field, ReasonField::platform);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(evaluate(d, LayerConfig{}, parse_platform("cuda:9.0")).reasons.size(), 1u);
  EXPECT_EQ(calls, 1);
}

TEST(Evaluate, UnloadableModuleLeadsOnTheDetectedMachineOnly) {
  Registry registry;  // empty: the module is not found
  BackendDescriptor d = permissive();
  d.module = "attn_no_such_module";
  d.caps.dtypes = {DType::float16};
  LayerConfig l;
  l.dtype = DType::float32;
  const Candidate here = evaluate(d, l, detect_cpu(), &registry);
  ASSERT_EQ(here.reasons.size(), 2u);
  EXPECT_EQ(here.reasons[0].field, ReasonField::module);
  EXPECT_NE(here.reasons[0].value.find("attn_no_such_module not loaded: "), std::string::npos) << here.reasons[0].value;
  EXPECT_EQ(here.reasons[0].expected, "a loadable module");
  EXPECT_EQ(here.reasons[1].field, ReasonField::dtype);
  // A planning target, or no registry to load with: the module is not the question.
  EXPECT_EQ(evaluate(d, l, cpu(), &registry).reasons.size(), 1u);
  EXPECT_EQ(evaluate(d, l, detect_cpu()).reasons.size(), 1u);
}

TEST(Evaluate, SelectorCandidatesAreEvaluate) {
  LayerConfig l;
  l.head_size = 72;
  l.dtype = DType::float32;
  SelectOptions o;
  o.use_env = false;
  o.platform = parse_platform("cpu:avx2");
  const Decision d = explain(l, o);
  ASSERT_FALSE(d.candidates.empty());
  for (const Candidate& c : d.candidates) {
    const Candidate again = evaluate(*Registry::instance().find(c.backend), l, *o.platform);
    EXPECT_EQ(c.valid, again.valid) << c.backend;
    EXPECT_EQ(c.reasons, again.reasons) << c.backend;
    EXPECT_EQ(c.priority, again.priority) << c.backend;
  }
}

TEST(ReasonFieldNames, OneTableBothWays) {
  for (int i = 0; i < int(ReasonField::other); ++i) {
    const auto f = ReasonField(i);
    ASSERT_FALSE(to_string(f).empty()) << i;
    const ReasonFieldName by_name{std::string(to_string(f))};
    EXPECT_EQ(by_name.id(), f) << to_string(f);
    EXPECT_EQ(ReasonFieldName(f).name(), to_string(f));
  }
  EXPECT_EQ(ReasonFieldName("bs_block_size").id(), ReasonField::other);
  EXPECT_EQ(ReasonFieldName("bs_block_size").name(), "bs_block_size");
  EXPECT_EQ((Reason{ReasonField::head_size, "72", "one of 64"}), (Reason{"head_size", "72", "one of 64"}));
}

TEST(PlatformKindNames, FromTheLibrary) {
  EXPECT_EQ(to_string(PlatformKind::cpu), "cpu");
  EXPECT_EQ(to_string(PlatformKind::cuda), "cuda");
  EXPECT_EQ(parse_platform("cuda:9.0").kind_name(), "cuda");
}

}  // namespace
