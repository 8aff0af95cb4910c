// Measured selection from hand-written tuning files (no timing here): the file round-trips, a
// measured faster valid choice wins, forced backends still win, ties go to priority, invalid
// recorded choices are never picked, and stale / foreign / corrupt files are ignored with a warning.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "attn/attn.hpp"
#include "selector/selector_test_util.hpp"

namespace {

using namespace attn;
using attn::test::ScopedEnv;
using attn::test::synthetic_caps;
using attn::test::synthetic_layer;
namespace fs = std::filesystem;

TunedChoice choice(const std::string& backend, const std::string& variant, int block, double decode_us, double prefill_us) {
  TunedChoice c;
  c.backend = backend, c.variant = variant, c.block_size = block, c.decode_us = decode_us, c.prefill_us = prefill_us;
  return c;
}

/// A tuning file for this machine and version with one config.
TuningFile file_for(const LayerConfig& cfg, std::vector<TunedChoice> choices) {
  TuningFile f;
  f.attn_version = version();
  f.fingerprint = tuning_fingerprint();
  f.platform = detect_cpu().to_string();
  f.tuned_at = "2026-11-30T12:00:00Z";
  f.threads = 2;
  f.configs.push_back({tuning_key(cfg), layer_config_json(cfg), std::move(choices)});
  return f;
}

// Two synthetic backends serving one layer: `fast` (priority 1) and `slow` (priority 2), the latter
// with block sizes that are multiples of 16 only, in the test's own registry. The selector reads
// the file this fixture writes.
struct Tuned : ::testing::Test {
  static inline int next_head = test::kSyntheticHeadBase + 600;
  int hs = next_head++;
  test::TestRegistry reg;
  std::string fast = reg.add_synthetic("tfast", synthetic_caps(hs), 1);
  std::string slow = reg.add_synthetic("tslow", [&] {
    Capabilities c = synthetic_caps(hs);
    c.block_sizes = SizeRule::multiple_of({16});
    return c;
  }(), 2);
  LayerConfig cfg = synthetic_layer(hs);
  fs::path path = fs::temp_directory_path() / ("attn_tune_test_" + std::to_string(::getpid()) + "_" + std::to_string(hs) + ".json");
  ScopedEnv backend_env{"ATTN_BACKEND", std::nullopt};
  ScopedEnv file_env{"ATTN_TUNE_FILE", path.string()};

  void use(const TuningFile& f) { use_text(f.to_json()); }
  void use_text(const std::string& text) {
    std::ofstream(path) << text;
    reload_tuning();
  }
  ~Tuned() override {
    fs::remove(path);
    reload_tuning();  // no file now: later tests select by priority
  }
};

TEST_F(Tuned, FileRoundTrips) {
  TuningFile f = file_for(cfg, {choice(fast, "", 64, 12.5, 300.25), choice(slow, "", 32, 0, 0)});
  f.configs[0].choices[1].error = "not timed: the time budget ran out";
  f.decode_shape = "4 × 1 over 1024";
  f.save(path.string());
  const TuningFile g = TuningFile::load(path.string());
  EXPECT_EQ(g.to_json(), f.to_json());
  EXPECT_EQ(g.attn_version, version());
  EXPECT_EQ(g.fingerprint, tuning_fingerprint());
  EXPECT_EQ(g.tuned_at, f.tuned_at);
  EXPECT_EQ(g.decode_shape, f.decode_shape);
  ASSERT_EQ(g.configs.size(), 1u);
  ASSERT_NE(g.find(cfg), nullptr);
  const auto& c = g.configs[0].choices;
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].backend, fast);
  EXPECT_EQ(c[0].block_size, 64);
  EXPECT_DOUBLE_EQ(c[0].decode_us, 12.5);
  EXPECT_DOUBLE_EQ(c[0].prefill_us, 300.25);
  EXPECT_TRUE(c[0].measured());
  EXPECT_FALSE(c[1].measured());
  EXPECT_EQ(c[1].error, f.configs[0].choices[1].error);
}

TEST_F(Tuned, KeyIgnoresTheUsersBlockSize) {
  const TuningFile f = file_for(cfg, {});
  LayerConfig with_block = cfg;
  with_block.block_size = 32;
  EXPECT_NE(f.find(with_block), nullptr);
  LayerConfig other = cfg;
  other.num_heads = 16;
  EXPECT_EQ(f.find(other), nullptr);
}

TEST_F(Tuned, MergeReplacesTheSameConfigAndKeepsOthers) {
  TuningFile older = file_for(cfg, {choice(fast, "", 16, 1, 1)});
  LayerConfig other = cfg;
  other.num_heads = 16;
  older.configs.push_back({tuning_key(other), layer_config_json(other), {choice(fast, "", 16, 5, 5)}});
  TuningFile newer = file_for(cfg, {choice(slow, "", 32, 2, 2)});
  newer.tuned_at = "2026-12-01T00:00:00Z";
  older.merge(newer);
  ASSERT_EQ(older.configs.size(), 2u);
  EXPECT_EQ(older.find(cfg)->choices.at(0).backend, slow);
  EXPECT_EQ(older.find(other)->choices.at(0).backend, fast);
  EXPECT_EQ(older.tuned_at, newer.tuned_at);
}

TEST_F(Tuned, UntunedSelectionIsByPriority) {
  const Decision d = select(cfg, reg.options());
  EXPECT_EQ(d.backend, fast);
  EXPECT_FALSE(d.tuned);
}

TEST_F(Tuned, MeasuredFasterValidChoiceWins) {
  use(file_for(cfg, {choice(fast, "", 16, 200, 900), choice(slow, "", 32, 100, 600)}));
  EXPECT_EQ(tuning_warning(), "");
  const Decision d = select(cfg, reg.options());
  EXPECT_EQ(d.backend, slow);
  EXPECT_TRUE(d.tuned);
  EXPECT_EQ(d.block_size, 32);  // the tuned block size, not the backend's preferred
  EXPECT_FALSE(d.block_size_from_user);
  ASSERT_FALSE(d.notes.empty());
  EXPECT_EQ(d.notes.back(), "measured 2.00× faster than " + fast + " block 16 on decode, 1.50× on prefill; tuned 2026-11-30");
  EXPECT_NE(d.to_json().find("\"tuned\":true"), std::string::npos);
  EXPECT_NE(d.to_text().find("(measured fastest)"), std::string::npos);
}

TEST_F(Tuned, UsersBlockSizeLimitsTheMeasuredChoices) {
  use(file_for(cfg, {choice(fast, "", 64, 200, 900), choice(slow, "", 32, 100, 600), choice(slow, "", 64, 300, 900)}));
  LayerConfig c = cfg;
  c.block_size = 64;
  const Decision d = select(c, reg.options());
  EXPECT_EQ(d.backend, fast);  // slow was only faster with blocks of 32
  EXPECT_EQ(d.block_size, 64);
  EXPECT_TRUE(d.block_size_from_user);
}

TEST_F(Tuned, ForcedBackendsWinOverTuning) {
  use(file_for(cfg, {choice(fast, "", 16, 200, 900), choice(slow, "", 32, 100, 600)}));
  SelectOptions o = reg.options();
  o.backend = fast;
  Decision d = select(cfg, o);
  EXPECT_EQ(d.backend, fast);
  EXPECT_EQ(d.forced_by, "argument");
  EXPECT_FALSE(d.tuned);
  ScopedEnv env("ATTN_BACKEND", fast);
  d = select(cfg, reg.options());
  EXPECT_EQ(d.backend, fast);
  EXPECT_EQ(d.forced_by, "env ATTN_BACKEND");
  EXPECT_FALSE(d.tuned);
}

TEST_F(Tuned, TiesGoToPriority) {
  // slow is 1% faster: within the timing noise, so priority decides.
  use(file_for(cfg, {choice(fast, "", 16, 101, 101), choice(slow, "", 32, 100, 100)}));
  const Decision d = select(cfg, reg.options());
  EXPECT_EQ(d.backend, fast);
  EXPECT_TRUE(d.tuned);
  EXPECT_EQ(d.block_size, 16);
  EXPECT_NE(d.notes.back().find("is the priority choice and the fastest"), std::string::npos) << d.notes.back();
}

TEST_F(Tuned, InvalidRecordedChoicesAreNeverSelected) {
  const std::string other = reg.add_synthetic("tother", synthetic_caps(hs + 5000), 0);  // cannot serve this head size
  use(file_for(cfg, {choice(fast, "", 16, 200, 900),
                     choice(other, "", 16, 1, 1),            // backend invalid for the layer
                     choice("no_such_backend", "", 16, 1, 1),  // backend unknown
                     choice(slow, "", 8, 1, 1),              // block size outside slow's rule
                     choice(slow, "avx9000", 16, 1, 1),      // a variant slow does not offer
                     choice(slow, "", 32, 0, 0)}));          // not measured
  const Decision d = select(cfg, reg.options());
  EXPECT_EQ(d.backend, fast);
  EXPECT_EQ(d.block_size, 16);
  EXPECT_TRUE(d.tuned);
}

TEST_F(Tuned, PlanningTargetsIgnoreTuning) {
  use(file_for(cfg, {choice(fast, "", 16, 200, 900), choice(slow, "", 32, 100, 600)}));
  SelectOptions o = reg.options();
  o.platform = parse_platform("cpu:avx2");
  const Decision d = select(cfg, o);
  EXPECT_EQ(d.backend, fast);
  EXPECT_FALSE(d.tuned);
}

TEST_F(Tuned, StaleOrForeignFilesAreIgnoredWithAWarning) {
  // A file whose slow backend would win, were it for this version and machine.
  const TuningFile ok = file_for(cfg, {choice(fast, "", 16, 200, 900), choice(slow, "", 32, 100, 600)});
  TuningFile stale = ok, foreign = ok;
  stale.attn_version = "0.0.1";
  foreign.fingerprint = "Some Other CPU|64 cores|cpu+avx2";
  for (const auto& [file, why] : {std::pair{stale, "stale, written by attn 0.0.1"},
                                  std::pair{foreign, "tuned on another machine (Some Other CPU"}}) {
    use(file);
    EXPECT_EQ(select(cfg, reg.options()).backend, fast) << why;
    EXPECT_NE(tuning_warning().find(why), std::string::npos) << tuning_warning();
  }
  use(ok);
  EXPECT_EQ(select(cfg, reg.options()).backend, slow);
}

TEST_F(Tuned, CorruptFilesAreIgnoredWithAWarning) {
  for (const std::string text : {"{not json", "[]", "{\"format\": 1}", "{\"format\": 99}",
                                 R"({"format":1,"attn_version":"x","fingerprint":"y","tuned_at":"z","configs":[{"key":1}]})"}) {
    use_text(text);
    EXPECT_EQ(select(cfg, reg.options()).backend, fast) << text;
    EXPECT_NE(tuning_warning().find("corrupt ("), std::string::npos) << text << ": " << tuning_warning();
  }
}

TEST_F(Tuned, MissingFileOrOffMeansPriorityWithoutWarning) {
  reload_tuning();  // the fixture's path does not exist yet
  EXPECT_EQ(active_tuning(), nullptr);
  EXPECT_EQ(tuning_warning(), "");
  ScopedEnv off("ATTN_TUNE_FILE", "off");
  EXPECT_EQ(tuning_file_path(), "");
  reload_tuning();
  EXPECT_EQ(active_tuning(), nullptr);
  EXPECT_EQ(tuning_warning(), "");
}

// A real backend: the tuned kernel variant flows into the decision, and from there into the layer.
TEST_F(Tuned, TunedVariantFlowsIntoTheDecisionAndTheLayer) {
  LayerConfig llama;  // 32 heads, 8 KV heads, head 128, bf16
  use(file_for(llama, {choice("cpu_flash", "generic", 16, 10, 10), choice("cpu_flash", "avx9000", 16, 1, 1)}));
  const Decision d = select(llama, reg.options());
  EXPECT_EQ(d.backend, "cpu_flash");
  EXPECT_EQ(d.variant, "generic");
  EXPECT_EQ(d.block_size, 16);
  ASSERT_TRUE(d.tuned);
  LayerParams p;
  p.config = llama;
  p.variant = d.variant;
  EXPECT_EQ(Registry::instance().create(d.backend, p)->variant(), "generic");
}

TEST(TunedVariant, UnknownVariantsAreRejectedByName) {
  LayerParams p;
  p.variant = "avx9000";
  try {
    Registry::instance().create("cpu_flash", p);
    FAIL() << "an unknown variant must be rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("variant='avx9000' invalid for cpu_flash"), std::string::npos) << e.what();
  }
  try {
    Registry::instance().create("reference", p);
    FAIL() << "a backend with one variant takes no variant name";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("variant='avx9000' invalid for backend reference"), std::string::npos) << e.what();
  }
}

}  // namespace
