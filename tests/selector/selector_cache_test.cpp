// The selector's memo: keyed on config + platform fingerprint + forced backend + registry
// generation; hits return the same decision (and the same error) as a fresh computation;
// clear_selector_cache() empties it and resets the counters.
#include <gtest/gtest.h>

#include "attn/attn.hpp"
#include "selector/selector_test_util.hpp"
#include "support/expect_error.hpp"

namespace {

using namespace attn;
using attn::test::throws_error;

struct SelectorCache : ::testing::Test {
  test::ScopedEnv env{"ATTN_BACKEND", std::nullopt};
  LayerConfig cfg = [] {
    LayerConfig c;
    c.num_heads = 8;
    c.num_kv_heads = 2;
    c.head_size = 40;
    return c;
  }();
  void SetUp() override { clear_selector_cache(); }
};

TEST_F(SelectorCache, ClearResetsEverything) {
  select(cfg);
  select(cfg);
  clear_selector_cache();
  const auto s = selector_cache_stats();
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.misses, 0u);
  EXPECT_EQ(s.entries, 0u);
}

TEST_F(SelectorCache, MissThenHit) {
  const Decision first = select(cfg);
  auto s = selector_cache_stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.entries, 1u);
  const Decision second = select(cfg);
  s = selector_cache_stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(second.to_json(), first.to_json()) << "a hit returns the computed decision";
}

TEST_F(SelectorCache, ExplainAndSelectShareEntries) {
  select(cfg);
  explain(cfg);
  EXPECT_EQ(selector_cache_stats().hits, 1u);
}

TEST_F(SelectorCache, EveryConfigFieldIsPartOfTheKey) {
  select(cfg);
  LayerConfig other = cfg;
  other.sliding_window = 64;
  select(other);
  EXPECT_EQ(selector_cache_stats().entries, 2u);
}

TEST_F(SelectorCache, PlatformIsPartOfTheKey) {
  select(cfg);
  SelectOptions avx2;
  avx2.platform = parse_platform("cpu:avx2");
  select(cfg, avx2);
  SelectOptions avx512;
  avx512.platform = parse_platform("cpu:avx512");
  select(cfg, avx512);
  select(cfg, avx2);
  const auto s = selector_cache_stats();
  EXPECT_EQ(s.entries, 3u);
  EXPECT_EQ(s.hits, 1u);
}

TEST_F(SelectorCache, DetectedAndPlannedTargetsWithEqualFeaturesDiffer) {
  // A planning target never loads modules, the detected machine does: different outcomes are
  // possible for the same features, so they must not share an entry.
  Platform planned = detect_cpu();
  planned.detected = false;
  SelectOptions o;
  o.platform = planned;
  select(cfg);
  select(cfg, o);
  EXPECT_EQ(selector_cache_stats().entries, 2u);
}

TEST_F(SelectorCache, ForcedBackendIsPartOfTheKey) {
  const Decision automatic = select(cfg);
  SelectOptions o;
  o.backend = "reference";
  const Decision forced = select(cfg, o);
  EXPECT_EQ(forced.forced_by, "argument");
  EXPECT_EQ(automatic.forced_by, "");
  EXPECT_EQ(selector_cache_stats().entries, 2u);
  o.backend = "";
  o.config_backend = "reference";
  EXPECT_EQ(select(cfg, o).forced_by, "config") << "same backend, other source: its own entry";
}

TEST_F(SelectorCache, EnvChangesAreSeenDespiteTheCache) {
  EXPECT_EQ(select(cfg).forced_by, "");
  test::ScopedEnv e("ATTN_BACKEND", "reference");
  const Decision d = select(cfg);
  EXPECT_EQ(d.backend, "reference");
  EXPECT_EQ(d.forced_by, "env ATTN_BACKEND");
}

TEST_F(SelectorCache, RegisteringABackendInvalidatesOldEntries) {
  const int hs = test::kSyntheticHeadBase + 500;
  LayerConfig c = test::synthetic_layer(hs);
  test::TestRegistry reg;
  EXPECT_EQ(select(c, reg.options()).backend, "reference");
  const std::string name = reg.add_synthetic("late", test::synthetic_caps(hs), 1);
  EXPECT_EQ(select(c, reg.options()).backend, name) << "a stale entry would still say reference";
  EXPECT_EQ(selector_cache_stats().misses, 2u);
}

TEST_F(SelectorCache, ErrorsAreCachedAndRethrown) {
  LayerConfig bad = cfg;
  bad.kv_cache_dtype = KVCacheDType::nvfp4;
  bad.use_mm_prefix = true;
  EXPECT_TRUE(throws_error([&] { select(bad); }, {"No valid attention backend"}));
  EXPECT_TRUE(throws_error([&] { select(bad); }, {"No valid attention backend"}));
  const auto s = selector_cache_stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 1u);
}

TEST_F(SelectorCache, InvalidConfigsAreNotCached) {
  LayerConfig bad = cfg;
  bad.num_kv_heads = 3;
  EXPECT_TRUE(throws_error([&] { select(bad); }, {"num_kv_heads=3"}));
  EXPECT_EQ(selector_cache_stats().entries, 0u);
}

}  // namespace
