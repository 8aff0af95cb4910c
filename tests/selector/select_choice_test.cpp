// How the selector chooses: priority among valid backends, forced-backend precedence
// (per_kind > argument > config > env ATTN_BACKEND, "auto" = none), the block-size note,
// planning targets (cpu:avx2, cuda:9.0) vs the detected CPU, and attention-free layers.
#include <gtest/gtest.h>

#include <optional>
#include <ostream>
#include <string>

#include "attn/attn.hpp"
#include "selector/selector_test_util.hpp"
#include "support/expect_error.hpp"

namespace {

using namespace attn;
using namespace attn::test;

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

// Who forces the backend: each level set to "fast", "slow", "auto" or another name (null: unset),
// and what wins.
struct PrecedenceCase {
  const char* name;
  const char* env;
  const char* argument;
  const char* config;
  const char* per_kind_full_attention;
  const char* per_kind_sliding_window;
  bool use_env;
  const char* expected_backend;
  const char* expected_forced_by;
};

void PrintTo(const PrecedenceCase& k, std::ostream* os) { *os << k.name; }

const PrecedenceCase kPrecedence[] = {
    // name                           env     argument config  per_kind full / sliding  use_env  wins    forced_by
    {"ArgumentForcesABackend",         nullptr, "slow", nullptr, nullptr, nullptr, true, "slow", "argument"},
    {"ArgumentBeatsConfig",            nullptr, "slow", "fast",  nullptr, nullptr, true, "slow", "argument"},
    {"ConfigIsUsedWithoutArgument",    nullptr, nullptr, "slow", nullptr, nullptr, true, "slow", "config"},
    {"ConfigBeatsEnv",                 "fast", nullptr, "slow",  nullptr, nullptr, true, "slow", "config"},
    {"EnvIsUsedLast",                  "slow", nullptr, nullptr, nullptr, nullptr, true, "slow", "env ATTN_BACKEND"},
    {"EnvIgnoredWhenDisabled",         "slow", nullptr, nullptr, nullptr, nullptr, false, "fast", ""},
    {"PerKindBeatsArgument",           nullptr, "fast", nullptr, "slow",  nullptr, true, "slow", "per_kind"},
    // A full-attention layer ignores the sliding_window override.
    {"PerKindAppliesOnlyToItsKind",    nullptr, nullptr, nullptr, nullptr, "slow", true, "fast", ""},
    {"AutoArgumentFallsThroughToConfig", nullptr, "auto", "slow", nullptr, nullptr, true, "slow", "config"},
    {"AutoEnvMeansNotForced",          "auto", nullptr, nullptr, nullptr, nullptr, true, "fast", ""},
};

struct Precedence : TwoBackends, ::testing::WithParamInterface<PrecedenceCase> {
  // "fast" and "slow" name this test's backends; any other text stands for itself.
  std::string backend(const char* role) const {
    const std::string r = role;
    return r == "fast" ? fast : r == "slow" ? slow : r;
  }
};

TEST_P(Precedence, PicksTheBackendAndSaysWhoForcedIt) {
  const PrecedenceCase& k = GetParam();
  std::optional<ScopedEnv> e;
  if (k.env) e.emplace("ATTN_BACKEND", backend(k.env));
  SelectOptions o = reg.options();
  o.use_env = k.use_env;
  if (k.argument) o.backend = backend(k.argument);
  if (k.config) o.config_backend = backend(k.config);
  if (k.per_kind_full_attention) o.per_kind["full_attention"] = backend(k.per_kind_full_attention);
  if (k.per_kind_sliding_window) o.per_kind["sliding_window"] = backend(k.per_kind_sliding_window);
  const Decision d = select(cfg, o);
  EXPECT_EQ(d.backend, backend(k.expected_backend));
  EXPECT_EQ(d.forced_by, k.expected_forced_by);
}

INSTANTIATE_TEST_SUITE_P(TwoBackends, Precedence, ::testing::ValuesIn(kPrecedence),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_F(TwoBackends, UnknownEnvBackendNamesTheEnv) {
  ScopedEnv e("ATTN_BACKEND", "not_a_backend");
  EXPECT_TRUE(throws_error([&] { select(cfg, reg.options()); }, {"'not_a_backend' (from env ATTN_BACKEND)"}));
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

// A test's own registry, ATTN_BACKEND unset, and a head size no other test uses.
struct OwnRegistry : ::testing::Test {
  static inline int next_head = test::kSyntheticHeadBase + 200;
  int hs = next_head++;
  test::TestRegistry reg;
  ScopedEnv env{"ATTN_BACKEND", std::nullopt};

  // Serves the layer at block sizes that are multiples of 16 only.
  Capabilities block_16_caps() const {
    Capabilities c = synthetic_caps(hs);
    c.block_sizes = SizeRule::multiple_of({16});
    return c;
  }
  // The layer with the user's --block-size 8.
  LayerConfig layer_with_block_8() const {
    LayerConfig c = synthetic_layer(hs);
    c.block_size = 8;
    return c;
  }
};

// --- block size ---

using SelectorBlockSize = OwnRegistry;

TEST_F(SelectorBlockSize, BackendPreferredWhenUnset) {
  const std::string name = reg.add_synthetic("bs_pref", synthetic_caps(hs), 1);
  const Decision d = select(synthetic_layer(hs), reg.options());
  EXPECT_EQ(d.backend, name);
  EXPECT_EQ(d.block_size, reg.registry().find(name)->preferred_block_size);
  EXPECT_FALSE(d.block_size_from_user);
}

TEST_F(SelectorBlockSize, NoteWhenTheUserBlockSizePrecludedBetterBackends) {
  const std::string best = reg.add_synthetic("bs_best", block_16_caps(), 1);
  const std::string next = reg.add_synthetic("bs_next", block_16_caps(), 2);
  LayerConfig cfg = layer_with_block_8();
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

TEST_F(SelectorBlockSize, NoNoteWhenTheBetterBackendFailsForOtherReasonsToo) {
  Capabilities strict = block_16_caps();
  strict.dtypes = {DType::bfloat16};
  const std::string other = reg.add_synthetic("bs_other", strict, 1);
  const LayerConfig cfg = layer_with_block_8();  // float32: excluded regardless of the block size
  // No block-size note; the slow path says the oracle serves the layer, and why bs_other cannot.
  const Decision d = select(cfg, reg.options());
  EXPECT_TRUE(d.notes.empty());
  EXPECT_NE(d.slow_path.find(other + ": dtype=float32"), std::string::npos) << d.slow_path;
}

TEST_F(SelectorBlockSize, NoNoteWhenABackendIsForced) {
  reg.add_synthetic("bs_forced", block_16_caps(), 1);
  SelectOptions o = reg.options();
  o.backend = "reference";
  EXPECT_TRUE(select(layer_with_block_8(), o).notes.empty());
}

// --- platforms ---

using SelectorPlatform = OwnRegistry;

TEST_F(SelectorPlatform, PlanningTargetUsesItsFeaturesNotThisMachine) {
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

TEST_F(SelectorPlatform, CudaPlanningTargetChecksComputeCapability) {
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
