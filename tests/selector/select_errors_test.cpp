// Every error the selector raises, with its full content: unknown backend (lists the known
// ones), forced backend that cannot serve the layer (its reasons and the backends that could),
// no valid backend (each candidate with its reasons), module that cannot load, and the
// invalid kv_cache_dtype name a user types.
#include <gtest/gtest.h>

#include "attn/attn.hpp"
#include "selector/selector_test_util.hpp"
#include "support/expect_error.hpp"

namespace {

using namespace attn;
using attn::test::error_message;
using attn::test::synthetic_caps;
using attn::test::synthetic_layer;
using attn::test::throws_error;

using attn::test::TestRegistry;

// Options ignoring ATTN_BACKEND, selecting from `reg` (a test's synthetic backends) when given.
SelectOptions no_env(TestRegistry* reg = nullptr) {
  SelectOptions o = reg ? reg->options() : SelectOptions{};
  o.use_env = false;
  return o;
}

SelectOptions forced(const std::string& backend, TestRegistry* reg = nullptr) {
  SelectOptions o = no_env(reg);
  o.backend = backend;
  return o;
}

std::string reasons_text(const std::vector<Reason>& rs) {
  std::vector<std::string> parts;
  for (auto& r : rs) parts.push_back(r.to_string());
  return "[" + join(parts, "; ") + "]";
}

TEST(SelectorErrors, InvalidKvCacheDTypeNameListsValidValues) {
  // What `--kv-cache-dtype fp9` reaches before any selection happens.
  EXPECT_TRUE(throws_error([] { parse_kv_cache_dtype("fp9"); },
                           {"Invalid kv_cache_dtype: 'fp9'. Valid values are: auto, float16, bfloat16, fp8, fp8_e4m3, fp8_e5m2"}));
}

TEST(SelectorErrors, UnknownBackendListsKnownOnes) {
  const std::string msg = error_message([] { select(LayerConfig{}, forced("flash_attn_9")); });
  EXPECT_NE(msg.find("Unknown attention backend: 'flash_attn_9' (from argument). Valid options are: "), std::string::npos) << msg;
  for (const std::string& name : Registry::instance().names()) EXPECT_NE(msg.find(name), std::string::npos) << name;
  EXPECT_TRUE(throws_error([] { explain(LayerConfig{}, forced("flash_attn_9")); }, {"Unknown attention backend"}))
      << "explain() raises forced-backend errors too";
}

TEST(SelectorErrors, UnknownBackendFromConfigNamesItsSource) {
  SelectOptions o = no_env();
  o.config_backend = "nope";
  EXPECT_TRUE(throws_error([&] { select(LayerConfig{}, o); }, {"'nope' (from config)"}));
}

TEST(SelectorErrors, ForcedBackendThatCannotServeTheLayer) {
  TestRegistry reg;
  const int hs = test::kSyntheticHeadBase + 1;
  Capabilities caps = synthetic_caps(hs);
  caps.dtypes = {DType::float16};
  caps.sinks = false;
  const std::string name = reg.add_synthetic("forced_invalid", caps, 50);
  LayerConfig cfg = synthetic_layer(hs);
  cfg.has_sink = true;

  std::vector<std::string> could;
  for (auto& c : explain(cfg, no_env(&reg)).candidates) if (c.valid) could.push_back(c.backend);
  ASSERT_FALSE(could.empty()) << "reference serves every head size";

  const std::string msg = error_message([&] { select(cfg, forced(name, &reg)); });
  EXPECT_NE(msg.find("Selected backend " + name + " (from argument) is not valid for this configuration on " +
                     detect_cpu().to_string()),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("Reasons: [dtype=float32, expected one of float16; has_sink=true, expected false (no attention sinks)]"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("Backends that can serve this layer: " + join(could) + "."), std::string::npos) << msg;
  EXPECT_TRUE(throws_error([&] { explain(cfg, forced(name, &reg)); }, {"Selected backend " + name}));
}

TEST(SelectorErrors, ForcedBackendWhenNoneCouldServe) {
  TestRegistry reg;
  const int hs = test::kSyntheticHeadBase + 2;
  const std::string name = reg.add_synthetic("forced_none", synthetic_caps(hs), 50);
  LayerConfig cfg = synthetic_layer(hs);
  cfg.use_mm_prefix = true;  // declared by nobody here
  cfg.kv_cache_dtype = KVCacheDType::nvfp4;
  ASSERT_TRUE(explain(cfg, no_env(&reg)).backend.empty());
  EXPECT_TRUE(throws_error([&] { select(cfg, forced(name, &reg)); }, {"Backends that can serve this layer: none."}));
}

TEST(SelectorErrors, Int4CacheNeedsAPowerOfTwoHeadSize) {
  // int4_per_token_head rotates each vector by a Walsh-Hadamard transform: a head of 96 is served by
  // no backend that reads the format, and the reason says why (not the cache constructor, later).
  LayerConfig cfg;
  cfg.num_heads = 8, cfg.num_kv_heads = 2, cfg.head_size = 96, cfg.dtype = DType::bfloat16;
  cfg.kv_cache_dtype = KVCacheDType::int4_per_token_head;
  const Decision d = explain(cfg, no_env());
  EXPECT_TRUE(d.backend.empty());
  bool named = false;
  for (const auto& c : d.candidates)
    if (c.backend == "cpu_flash" || c.backend == "reference") {
      named = true;
      EXPECT_NE(reasons_text(c.reasons).find("head_size=96, expected a power of two for kv_cache_dtype int4_per_token_head"),
                std::string::npos)
          << reasons_text(c.reasons);
    }
  EXPECT_TRUE(named);
  cfg.head_size = 128;
  EXPECT_EQ(explain(cfg, no_env()).backend, "cpu_flash");
}

TEST(SelectorErrors, ForcedBackendForAnotherPlatform) {
  // reference is CPU-only: forced on a CUDA planning target, the platform is its reason.
  SelectOptions o = forced("reference");
  o.platform = parse_platform("cuda:9.0");
  EXPECT_TRUE(throws_error([&] { select(LayerConfig{}, o); }, {"Selected backend reference", "platform=cuda, expected cpu"}));
}

TEST(SelectorErrors, NoValidBackendListsEveryCandidateWithItsReasons) {
  LayerConfig cfg = synthetic_layer(test::kSyntheticHeadBase + 3);
  cfg.use_mm_prefix = true;
  cfg.kv_cache_dtype = KVCacheDType::fp8_ds_mla;  // an MLA format on a non-MLA layer
  const Decision d = explain(cfg, no_env());
  ASSERT_TRUE(d.backend.empty());
  ASSERT_FALSE(d.candidates.empty());
  const std::string msg = error_message([&] { select(cfg, no_env()); });
  EXPECT_EQ(msg.rfind("No valid attention backend found for " + detect_cpu().to_string() + " with " + cfg.to_string() +
                          ". Reasons: {",
                      0),
            0u)
      << msg;
  for (auto& c : d.candidates) {
    EXPECT_FALSE(c.valid);
    EXPECT_FALSE(c.reasons.empty()) << c.backend;
    EXPECT_NE(msg.find(c.backend + ": " + reasons_text(c.reasons)), std::string::npos) << c.backend << "\n" << msg;
  }
  EXPECT_NE(msg.find("reference: [kv_cache_dtype=fp8_ds_mla"), std::string::npos) << msg;
}

TEST(SelectorErrors, NoValidBackendOnACudaPlanningTarget) {
  // Only CUDA-capable backends are candidates there; the CPU ones are not listed at all.
  SelectOptions o = no_env();
  o.platform = parse_platform("cuda:9.0");
  LayerConfig cfg = synthetic_layer(test::kSyntheticHeadBase + 4);
  cfg.dtype = DType::float32;
  const Decision d = explain(cfg, o);
  for (auto& c : d.candidates) EXPECT_NE(c.backend, "reference");
  if (d.backend.empty()) {
    EXPECT_TRUE(throws_error([&] { select(cfg, o); }, {"No valid attention backend found for cuda 9.0"}));
  }
}

TEST(SelectorErrors, ExplainReturnsTheDecisionWhenNothingIsValid) {
  LayerConfig cfg = synthetic_layer(test::kSyntheticHeadBase + 5);
  cfg.kv_cache_dtype = KVCacheDType::turboquant_3bit_nc;
  cfg.use_mm_prefix = true;
  Decision d;
  ASSERT_NO_THROW(d = explain(cfg, no_env()));
  EXPECT_TRUE(d.backend.empty());
  EXPECT_EQ(d.to_text().rfind("no valid backend", 0), 0u);
}

TEST(SelectorErrors, ModuleThatCannotLoadIsAReasonNotACrash) {
  TestRegistry reg;
  const int hs = test::kSyntheticHeadBase + 6;
  const std::string name = reg.add_synthetic("module", synthetic_caps(hs), 1, "does_not_exist");
  const LayerConfig cfg = synthetic_layer(hs);

  const Decision d = explain(cfg, no_env(&reg));  // detected platform: the module load is tried
  EXPECT_EQ(d.backend, "reference");
  const Candidate* c = nullptr;
  for (auto& x : d.candidates) if (x.backend == name) c = &x;
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->valid);
  ASSERT_EQ(c->reasons.size(), 1u);
  EXPECT_EQ(c->reasons[0].field, "module");
  EXPECT_EQ(c->reasons[0].value, "does_not_exist not loaded: libdoes_not_exist.so not found");
  EXPECT_EQ(c->reasons[0].expected, "a loadable module");

  EXPECT_TRUE(throws_error([&] { select(cfg, forced(name, &reg)); },
                           {"Selected backend " + name, "module=does_not_exist not loaded: libdoes_not_exist.so not found"}));
  LayerParams params;
  params.config = cfg;
  EXPECT_TRUE(throws_error([&] { reg.registry().create(name, params); },
                           {"backend " + name + ": module does_not_exist not loaded"}));
}

TEST(SelectorErrors, ModuleReasonComesBeforeCapabilityReasons) {
  TestRegistry reg;
  const int hs = test::kSyntheticHeadBase + 7;
  Capabilities caps = synthetic_caps(hs);
  caps.dtypes = {DType::bfloat16};
  const std::string name = reg.add_synthetic("module_order", caps, 1, "also_missing");
  const Decision d = explain(synthetic_layer(hs), no_env(&reg));
  for (auto& c : d.candidates)
    if (c.backend == name) {
      ASSERT_EQ(c.reasons.size(), 2u);
      EXPECT_EQ(c.reasons[0].field, "module");
      EXPECT_EQ(c.reasons[1].field, "dtype");
    }
}

TEST(SelectorErrors, PlanningTargetDoesNotLoadModules) {
  TestRegistry reg;
  // Planning for another machine: whether a module loads *here* is irrelevant.
  const int hs = test::kSyntheticHeadBase + 8;
  const std::string name = reg.add_synthetic("module_planned", synthetic_caps(hs), 1, "not_here_either");
  SelectOptions o = no_env(&reg);
  o.platform = parse_platform("cpu:avx512");
  EXPECT_EQ(select(synthetic_layer(hs), o).backend, name);
}

TEST(SelectorErrors, ExtraChecksAreAppendedAfterGenericReasons) {
  TestRegistry reg;
  const int hs = test::kSyntheticHeadBase + 9;
  Capabilities caps = synthetic_caps(hs);
  caps.dtypes = {DType::float16};
  const std::string name = reg.add_synthetic("extra", caps, 1, {}, [](const LayerConfig& c, const Platform&) {
    return std::vector<Reason>{{"num_heads", std::to_string(c.num_heads), "a multiple of 16 (synthetic rule)"}};
  });
  const std::string msg = error_message([&] { select(synthetic_layer(hs), forced(name, &reg)); });
  EXPECT_NE(msg.find("[dtype=float32, expected one of float16; num_heads=8, expected a multiple of 16 (synthetic rule)]"),
            std::string::npos)
      << msg;
}

}  // namespace
