// `attn tune` end to end on a tiny model with a tiny budget: it writes a tuning file for this
// machine, prints every timed choice and the selector's new decision, and `attn plan` then shows
// the measured choice. Also the library's tune() and its option checks.
#include <gtest/gtest.h>

#include <filesystem>

#include "attn/attn.hpp"
#include "cli/cli_runner.hpp"
#include "support/expect_error.hpp"

namespace {

using namespace attn::cli_test;
using attn::test::throws_error;

TEST(TuneCli, WritesATuningFileThatPlanUses) {
  const fs::path model = tiny_model("tune", tiny_llama());
  const fs::path file = fs::temp_directory_path() / ("attn_tune_cli_" + std::to_string(::getpid()) + ".json");
  const std::string env = "ATTN_TUNE_FILE='" + file.string() + "'";
  const CliResult r = attn_cli("tune '" + model.string() + "' --budget 2 --threads 1 --decode-batch 2 --decode-context 64 --prefill-len 16", env);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("cpu_flash["), std::string::npos) << "a progress line names what runs: " << r.err;
  EXPECT_NE(r.out.find("layers 0-2: 4 heads / 2 kv, head 64"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("wrote " + file.string()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("measured"), std::string::npos) << r.out;

  const attn::TuningFile f = attn::TuningFile::load(file.string());
  EXPECT_EQ(f.attn_version, attn::version());
  EXPECT_EQ(f.fingerprint, attn::tuning_fingerprint());
  EXPECT_EQ(f.threads, 1);
  ASSERT_EQ(f.configs.size(), 1u);
  bool generic = false, measured = false;
  for (const auto& c : f.configs[0].choices) {
    generic |= c.backend == "cpu_flash" && c.variant == "generic";
    measured |= c.measured();
    EXPECT_TRUE(c.measured() || !c.error.empty()) << c.backend << " " << c.variant;
  }
  EXPECT_TRUE(generic) << "every variant this CPU runs is a choice";
  EXPECT_TRUE(measured);

  const CliResult plan = attn_cli("plan --model '" + model.string() + "'", env);
  ASSERT_EQ(plan.rc, 0) << plan.err;
  EXPECT_NE(plan.out.find("note: measured"), std::string::npos) << plan.out;
  // The tuned kernel variant is the layer's, never handed to the reference the run checks against.
  const CliResult run = attn_cli("run --model '" + model.string() + "'", env);
  EXPECT_EQ(run.rc, 0) << run.out << run.err;
  EXPECT_EQ(run.err.find("invalid for backend reference"), std::string::npos) << run.err;
  fs::remove(file);
  fs::remove(model);
}

TEST(TuneCli, WritingTheMachineDefaultSaysSo) {
  const fs::path model = tiny_model("tune_default", tiny_llama());
  const fs::path cache = fs::temp_directory_path() / ("attn_tune_xdg_" + std::to_string(::getpid()));
  const std::string env = "ATTN_TUNE_FILE= XDG_CACHE_HOME='" + cache.string() + "'";
  const CliResult r = attn_cli("tune '" + model.string() + "' --budget 1 --threads 1 --decode-batch 1 --decode-context 32 --prefill-len 8", env);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const fs::path written = cache / "attn" / "tuning.json";
  EXPECT_TRUE(fs::exists(written));
  EXPECT_NE(r.err.find("note: wrote this machine's default tuning file " + written.string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("every selection here"), std::string::npos) << r.err;
  // An explicit destination is what the user asked for: no note.
  const fs::path file = cache / "explicit.json";
  const CliResult e = attn_cli("tune '" + model.string() + "' --budget 1 --threads 1 --decode-batch 1 --decode-context 32 --prefill-len 8 --output '" +
                               file.string() + "'", env);
  ASSERT_EQ(e.rc, 0) << e.err;
  EXPECT_EQ(e.err.find("note: wrote this machine's default"), std::string::npos) << e.err;
  fs::remove_all(cache);
  fs::remove(model);
}

TEST(TuneCli, CorruptFileGivesOneWarningAndPriority) {
  const fs::path model = tiny_model("tune_corrupt", tiny_llama());
  const fs::path file = fs::temp_directory_path() / ("attn_tune_corrupt_" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << "{ not json";
  const CliResult r = attn_cli("plan --model '" + model.string() + "'", "ATTN_LOG=warning ATTN_TUNE_FILE='" + file.string() + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string warning = "[attn warning] ignoring tuning file " + file.string() + ": corrupt";
  const auto first = r.err.find(warning);
  EXPECT_NE(first, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(warning, first + 1), std::string::npos) << "one warning, not one per layer: " << r.err;
  EXPECT_EQ(r.out.find("measured"), std::string::npos) << r.out;
  fs::remove(file);
  fs::remove(model);
}

TEST(TuneCli, RejectsBadOptionsByName) {
  const CliResult r = attn_cli("tune llama-3.1-8b --platform cpu:avx2");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--platform=cpu:avx2 invalid"), std::string::npos) << r.err;
  const CliResult b = attn_cli("tune llama-3.1-8b --decode-context 0");
  EXPECT_EQ(b.rc, 1);
  EXPECT_NE(b.err.find("--decode-context"), std::string::npos) << b.err;
}

TEST(Tune, TimesEveryValidChoiceWithinTheBudget) {
  attn::LayerConfig c;
  c.num_heads = 4, c.num_kv_heads = 2, c.head_size = 64;
  attn::TuneOptions o;
  o.budget_s = 1, o.threads = 1, o.decode_batch = 2, o.decode_context = 32, o.prefill_len = 8, o.rounds = 2;
  int calls = 0;
  o.progress = [&](const attn::TuneProgress& p) {
    ++calls;
    EXPECT_LE(p.done, p.total);
  };
  const attn::TuningFile f = attn::tune({c, c}, o);  // equal configs are timed once
  ASSERT_EQ(f.configs.size(), 1u);
  EXPECT_EQ(f.configs[0].key, attn::tuning_key(c));
  EXPECT_GT(calls, 0);
  for (const auto& ch : f.configs[0].choices) {
    EXPECT_TRUE(ch.block_size == 16 || ch.block_size == 32 || ch.block_size == 64 || ch.block_size == 128) << ch.block_size;
    if (ch.measured()) { EXPECT_GT(ch.decode_us, 0); }
  }
}

TEST(Tune, RejectsBadOptions) {
  attn::TuneOptions o;
  o.budget_s = 0;
  EXPECT_TRUE(throws_error([&] { attn::tune({attn::LayerConfig{}}, o); }, {"budget=0", "seconds"}));
  o = {};
  o.backend = "nope";
  EXPECT_TRUE(throws_error([&] { attn::tune({attn::LayerConfig{}}, o); }, {"backend='nope'", "cpu_flash"}));
  o = {};
  o.block_sizes = {0};
  EXPECT_TRUE(throws_error([&] { attn::tune({attn::LayerConfig{}}, o); }, {"block_sizes=0"}));
}

}  // namespace
