// How the selector chooses: priority among valid backends, forced-backend precedence
// (per_kind > argument > config > env ATTN_BACKEND, "auto" = none), the block-size note,
// planning targets (cpu:avx2, cuda:9.0) vs the detected CPU, and attention-free layers.
#include <gtest/gtest.h>

#include "attn/attn.hpp"
#include "selector/selector_test_util.hpp"
#include "support/expect_error.hpp"

namespace {

using namespace attn;
using attn::test::ScopedEnv;
using attn::test::synthetic_caps;
using attn::test::synthetic_layer;
using attn::test::throws_error;

// Two synthetic backends serving the same layer: `fast` (priority 1) and `slow` (priority 2), in
// the test's own registry.
struct TwoBackends : ::testing::Test {
  static inline int next_head = test::kSyntheticHeadBase + 100;
  int hs = next_head++;
  test::TestRegistry reg;
  std::string fast = reg.add_synthetic("fast", synthetic_caps(hs), 1);
  std::string slow = reg.add_synthetic("slow", synthetic_caps(hs), 2);
  LayerConfig cfg = synthetic_layer(hs);
  ScopedEnv env{"ATTN_BACKEND", std::nullopt};
};

TEST_F(TwoBackends, LowestPriorityNumberWins) {
  const Decision d = select(cfg, reg.options());
  EXPECT_EQ(d.backend, fast);
  EXPECT_EQ(d.forced_by, "");
  // Candidates come in priority order, every one of them checked.
  for (std::size_t i = 1; i < d.candidates.size(); ++i) EXPECT_LE(d.candidates[i - 1].priority, d.candidates[i].priority);
}

TEST_F(TwoBackends, ArgumentForcesABackend) {
  SelectOptions o = reg.options();
  o.backend = slow;
  const Decision d = select(cfg, o);
  EXPECT_EQ(d.backend, slow);
  EXPECT_EQ(d.forced_by, "argument");
}

TEST_F(TwoBackends, ArgumentBeatsConfig) {
  SelectOptions o = reg.options();
  o.backend = slow;
  o.config_backend = fast;
  EXPECT_EQ(select(cfg, o).backend, slow);
}

TEST_F(TwoBackends, ConfigIsUsedWithoutArgument) {
  SelectOptions o = reg.options();
  o.config_backend = slow;
  const Decision d = select(cfg, o);
  EXPECT_EQ(d.backend, slow);
  EXPECT_EQ(d.forced_by, "config");
}

TEST_F(TwoBackends, ConfigBeatsEnv) {
  ScopedEnv e("ATTN_BACKEND", fast);
  SelectOptions o = reg.options();
  o.config_backend = slow;
  EXPECT_EQ(select(cfg, o).forced_by, "config");
}

TEST_F(TwoBackends, EnvIsUsedLast) {
  ScopedEnv e("ATTN_BACKEND", slow);
  const Decision d = select(cfg, reg.options());
  EXPECT_EQ(d.backend, slow);
  EXPECT_EQ(d.forced_by, "env ATTN_BACKEND");
}

TEST_F(TwoBackends, EnvIgnoredWhenDisabled) {
  ScopedEnv e("ATTN_BACKEND", slow);
  SelectOptions o = reg.options();
  o.use_env = false;
  EXPECT_EQ(select(cfg, o).backend, fast);
}

TEST_F(TwoBackends, UnknownEnvBackendNamesTheEnv) {
  ScopedEnv e("ATTN_BACKEND", "not_a_backend");
  EXPECT_TRUE(throws_error([&] { select(cfg, reg.options()); }, {"'not_a_backend' (from env ATTN_BACKEND)"}));
}

TEST_F(TwoBackends, PerKindBeatsArgument) {
  SelectOptions o = reg.options();
  o.backend = fast;
  o.per_kind["full_attention"] = slow;
  const Decision d = select(cfg, o);
  EXPECT_EQ(d.backend, slow);
  EXPECT_EQ(d.forced_by, "per_kind");
}

TEST_F(TwoBackends, PerKindAppliesOnlyToItsKind) {
  SelectOptions o = reg.options();
  o.per_kind["sliding_window"] = slow;
  EXPECT_EQ(select(cfg, o).backend, fast) << "a full-attention layer ignores the sliding_window override";
}

TEST_F(TwoBackends, AutoMeansNotForcedAtEveryLevel) {
  for (const char* a : {"", "auto", "AUTO", "Auto"}) {
    SelectOptions o = reg.options();
    o.backend = a;
    o.config_backend = a;
    o.per_kind["full_attention"] = a;
    const Decision d = select(cfg, o);
    EXPECT_EQ(d.backend, fast) << "'" << a << "'";
    EXPECT_EQ(d.forced_by, "") << "'" << a << "'";
  }
}

TEST_F(TwoBackends, AutoArgumentFallsThroughToConfig) {
  SelectOptions o = reg.options();
  o.backend = "auto";
  o.config_backend = slow;
  EXPECT_EQ(select(cfg, o).forced_by, "config");
}

TEST_F(TwoBackends, AutoEnvMeansNotForced) {
  ScopedEnv e("ATTN_BACKEND", "auto");
  const Decision d = select(cfg, reg.options());
  EXPECT_EQ(d.backend, fast);
  EXPECT_EQ(d.forced_by, "");
}

// --- block size ---

TEST(SelectorBlockSize, BackendPreferredWhenUnset) {
  test::TestRegistry reg;
  ScopedEnv env("ATTN_BACKEND", std::nullopt);
  const int hs = test::kSyntheticHeadBase + 200;
  const std::string name = reg.add_synthetic("bs_pref", synthetic_caps(hs), 1);
  const Decision d = select(synthetic_layer(hs), reg.options());
  EXPECT_EQ(d.backend, name);
  EXPECT_EQ(d.block_size, reg.registry().find(name)->preferred_block_size);
  EXPECT_FALSE(d.block_size_from_user);
}

TEST(SelectorBlockSize, NoteWhenTheUserBlockSizePrecludedBetterBackends) {
  test::TestRegistry reg;
  ScopedEnv env("ATTN_BACKEND", std::nullopt);
  const int hs = test::kSyntheticHeadBase + 201;
  Capabilities strict = synthetic_caps(hs);
  strict.block_sizes = SizeRule::multiple_of({16});
  const std::string best = reg.add_synthetic("bs_best", strict, 1);
  const std::string next = reg.add_synthetic("bs_next", strict, 2);
  LayerConfig cfg = synthetic_layer(hs);
  cfg.block_size = 8;
  const Decision d = select(cfg, reg.options());
  EXPECT_EQ(d.backend, "reference");
  EXPECT_EQ(d.block_size, 8);
  EXPECT_TRUE(d.block_size_from_user);
  ASSERT_EQ(d.notes.size(), 1u);
  EXPECT_EQ(d.notes[0], "--block-size 8 precluded higher-priority backend(s) " + best + ", " + next +
                            ". Using reference instead, which may reduce performance. Remove --block-size to let the backend choose.");
  EXPECT_NE(d.to_text().find("note: --block-size 8 precluded"), std::string::npos);

  cfg.block_size = 32;
  const Decision ok = select(cfg, reg.options());
  EXPECT_EQ(ok.backend, best);
  EXPECT_TRUE(ok.notes.empty());
}

TEST(SelectorBlockSize, NoNoteWhenTheBetterBackendFailsForOtherReasonsToo) {
  test::TestRegistry reg;
  ScopedEnv env("ATTN_BACKEND", std::nullopt);
  const int hs = test::kSyntheticHeadBase + 202;
  Capabilities strict = synthetic_caps(hs);
  strict.block_sizes = SizeRule::multiple_of({16});
  strict.dtypes = {DType::bfloat16};
  const std::string other = reg.add_synthetic("bs_other", strict, 1);
  LayerConfig cfg = synthetic_layer(hs);  // float32: excluded regardless of the block size
  cfg.block_size = 8;
  // No block-size note; the slow path says the oracle serves the layer, and why bs_other cannot.
  const Decision d = select(cfg, reg.options());
  EXPECT_TRUE(d.notes.empty());
  EXPECT_NE(d.slow_path.find(other + ": dtype=float32"), std::string::npos) << d.slow_path;
}

TEST(SelectorBlockSize, NoNoteWhenABackendIsForced) {
  test::TestRegistry reg;
  ScopedEnv env("ATTN_BACKEND", std::nullopt);
  const int hs = test::kSyntheticHeadBase + 203;
  Capabilities strict = synthetic_caps(hs);
  strict.block_sizes = SizeRule::multiple_of({16});
  reg.add_synthetic("bs_forced", strict, 1);
  LayerConfig cfg = synthetic_layer(hs);
  cfg.block_size = 8;
  SelectOptions o = reg.options();
  o.backend = "reference";
  EXPECT_TRUE(select(cfg, o).notes.empty());
}

// --- platforms ---

TEST(SelectorPlatform, PlanningTargetUsesItsFeaturesNotThisMachine) {
  test::TestRegistry reg;
  ScopedEnv env("ATTN_BACKEND", std::nullopt);
  const int hs = test::kSyntheticHeadBase + 300;
  Capabilities caps = synthetic_caps(hs);
  caps.required_cpu_features = {CpuFeature::avx512f, CpuFeature::avx512_bf16};
  const std::string name = reg.add_synthetic("bf16_cpu", caps, 1);
  const LayerConfig cfg = synthetic_layer(hs);

  SelectOptions avx2 = reg.options();
  avx2.platform = parse_platform("cpu:avx2");
  const Decision planned = select(cfg, avx2);
  EXPECT_EQ(planned.backend, "reference");
  EXPECT_NE(planned.platform.find("[planning target]"), std::string::npos);
  for (auto& c : planned.candidates)
    if (c.backend == name) {
      EXPECT_EQ(c.reasons,
                (std::vector<Reason>{{"cpu_features", "missing avx512f, avx512_bf16", "CPU with avx512f, avx512_bf16"}}));
    }

  SelectOptions bf16 = reg.options();
  bf16.platform = parse_platform("cpu:avx512_bf16");
  EXPECT_EQ(select(cfg, bf16).backend, name);

  const bool here = detect_cpu().has(CpuFeature::avx512f) && detect_cpu().has(CpuFeature::avx512_bf16);
  EXPECT_EQ(select(cfg, reg.options()).backend, here ? name : "reference") << detect_cpu().to_string();
  EXPECT_EQ(select(cfg, reg.options()).platform, detect_cpu().to_string());
}

TEST(SelectorPlatform, CudaPlanningTargetChecksComputeCapability) {
  test::TestRegistry reg;
  ScopedEnv env("ATTN_BACKEND", std::nullopt);
  const int hs = test::kSyntheticHeadBase + 301;
  Capabilities caps = synthetic_caps(hs);
  caps.platforms = {PlatformKind::cuda};
  caps.min_cc = ComputeCapability{8, 0};
  const std::string name = reg.add_synthetic("sm80", caps, 1);
  const LayerConfig cfg = synthetic_layer(hs);

  SelectOptions h100 = reg.options();
  h100.platform = parse_platform("cuda:9.0");
  const Decision d = select(cfg, h100);
  EXPECT_EQ(d.backend, name);
  EXPECT_EQ(d.platform, "cuda 9.0 (sm_90) [planning target]");
  for (auto& c : d.candidates) EXPECT_NE(c.backend, "reference") << "CPU backends are not candidates on cuda";

  SelectOptions t4 = reg.options();
  t4.platform = parse_platform("cuda:7.5");
  const Decision old = explain(cfg, t4);
  EXPECT_NE(old.backend, name);
  for (auto& c : old.candidates)
    if (c.backend == name) { EXPECT_EQ(c.reasons, (std::vector<Reason>{{"compute_capability", "7.5", ">= 8.0"}})); }

  // On the CPU this backend is no candidate at all.
  for (auto& c : explain(cfg, reg.options()).candidates) EXPECT_NE(c.backend, name);
}

// --- attention-free layers ---

TEST(SelectorAttentionFree, MambaLayerGetsNoAttention) {
  ScopedEnv env("ATTN_BACKEND", std::nullopt);
  LayerConfig cfg;
  cfg.is_attention_free = true;
  const Decision d = select(cfg);
  EXPECT_EQ(d.backend, "no_attention");
  for (auto& c : d.candidates)
    if (c.backend == "reference") { EXPECT_EQ(c.reasons[0].field, "is_attention_free"); }
}

TEST(SelectorAttentionFree, AlsoOnACudaPlanningTarget) {
  LayerConfig cfg;
  cfg.is_attention_free = true;
  SelectOptions o;
  o.use_env = false;
  o.platform = parse_platform("cuda:9.0");
  EXPECT_EQ(select(cfg, o).backend, "no_attention");
}

TEST(SelectorAttentionFree, AttentionLayerNeverGetsNoAttention) {
  SelectOptions o;
  o.use_env = false;
  o.backend = "no_attention";
  EXPECT_TRUE(throws_error([&] { select(LayerConfig{}, o); },
                           {"Selected backend no_attention", "is_attention_free=false, expected true (serves attention-free layers only)"}));
}

TEST(SelectorAttentionFree, ForcingAnAttentionBackendOnAMambaLayer) {
  LayerConfig cfg;
  cfg.is_attention_free = true;
  SelectOptions o;
  o.use_env = false;
  o.backend = "reference";
  EXPECT_TRUE(throws_error([&] { select(cfg, o); },
                           {"is_attention_free=true, expected false (needs an attention layer)", "Backends that can serve this layer: no_attention"}));
}

}  // namespace

// --- the slow reference path ---

TEST(SelectorSlowPath, DecisionSaysWhenTheOracleServesTheLayer) {
  ScopedEnv env("ATTN_BACKEND", std::nullopt);
  LayerConfig cfg;  // a head size no production CPU backend serves
  cfg.num_heads = 4, cfg.num_kv_heads = 2, cfg.head_size = 300;
  const Decision d = select(cfg);
  ASSERT_EQ(d.backend, "reference");
  EXPECT_NE(d.slow_path.find("no production backend serves this layer ("), std::string::npos) << d.slow_path;
  EXPECT_NE(d.slow_path.find("cpu_flash: head_size=300"), std::string::npos) << d.slow_path;
  EXPECT_NE(d.to_text().find("\nslow reference path: reference is the correctness oracle"), std::string::npos) << d.to_text();
  EXPECT_NE(d.to_json().find("\"slow_path\":\"reference is the correctness oracle"), std::string::npos) << d.to_json();

  SelectOptions forced;
  forced.backend = "reference";
  EXPECT_NE(select(LayerConfig{}, forced).slow_path.find("forced (argument)"), std::string::npos);

  const Decision fast = select(LayerConfig{});  // Llama-like: a production backend
  EXPECT_NE(fast.backend, "reference");
  EXPECT_TRUE(fast.slow_path.empty()) << fast.slow_path;
  EXPECT_EQ(fast.to_text().find("slow reference path"), std::string::npos);
}

TEST(SelectorNames, BackendNamesIgnoreCase) {
  // vLLM spells backend names upper-case (CPU_FLASH); the argument, the env and "auto" match in any case.
  ScopedEnv env("ATTN_BACKEND", "Reference");
  LayerConfig cfg;
  EXPECT_EQ(select(cfg).backend, "reference");
  SelectOptions o;
  o.backend = "CPU_FLASH";
  const Decision d = select(cfg, o);
  EXPECT_EQ(d.backend, "cpu_flash");
  EXPECT_EQ(d.forced_by, "argument");
  o.backend = "AUTO";  // forces nothing: the env's backend applies
  EXPECT_EQ(select(cfg, o).backend, "reference");
}
