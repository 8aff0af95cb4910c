// The `attn` binary refuses sizes beyond attn's limits with one line naming the option, the value
// and the limit: each test is a reproducer that used to crash, allocate without bound or report
// a wrapped number.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_runner.hpp"

namespace {

using namespace attn::cli_test;  // attn_cli, CliResult, tiny_model, tiny_llama
using nlohmann::json;
namespace fs = std::filesystem;

/// `attn <command> --model <cfg written to disk> <args>`.
CliResult run_on(const json& cfg, const std::string& command, const std::string& args = "", const std::string& env = "") {
  const fs::path model = tiny_model("limits", cfg);
  const CliResult r = attn_cli(command + " --model '" + model.string() + "' " + args, env);
  fs::remove(model);
  return r;
}

/// `attn <args>` must fail cleanly (exit 1, not a signal) with every fragment on stderr; `run`
/// and `plan` get a tiny llama config unless `args` names a model.
void expect_refused(const std::string& args, std::initializer_list<std::string> fragments, const std::string& env = "") {
  const bool needs_model = (args.rfind("run", 0) == 0 || args.rfind("plan", 0) == 0) && args.find("--model") == std::string::npos;
  const std::string cmd = needs_model ? args.substr(0, args.find(' ')) : args;
  const CliResult r = needs_model ? run_on(tiny_llama(), cmd, args.substr(cmd.size()), env) : attn_cli(cmd, env);
  EXPECT_EQ(r.rc, 1) << cmd << "\n" << r.err;
  for (const auto& f : fragments) EXPECT_NE(r.err.find(f), std::string::npos) << cmd << ": lacks '" << f << "'\n" << r.err;
}

TEST(CliLimits, DecodeStepsBeyondASequenceNameTheOptions) {
  expect_refused("run --decode-steps 2147483647", {"--prompt-len + --decode-steps=128 + 2147483647", "at most 2147483647"});
  const CliResult r = attn_cli("run --decode-steps 2147483647");
  EXPECT_EQ(r.err.find("num_blocks=-"), std::string::npos) << r.err;
}

TEST(CliLimits, ThreadsBeyondTheLimitAreRefused) {
  expect_refused("run --threads 100000", {"--threads=100000", "<= 1024"});
  expect_refused("bench --quick --threads 100000", {"--threads=100000", "<= 1024"});
  expect_refused("run --threads -1", {"--threads=-1", ">= 0"});
}

TEST(CliLimits, BlockSizeZeroIsOneShortLine) {
  for (const char* cmd : {"run", "plan"}) {
    const CliResult r = run_on(tiny_llama(), cmd, "--block-size 0");
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_NE(r.err.find("--block-size=0 invalid: expected > 0 and <= 65536"), std::string::npos) << r.err;
    EXPECT_LT(r.err.size(), 160u) << r.err;
  }
  expect_refused("plan --block-size 1048576", {"--block-size=1048576", "<= 65536"});
}

TEST(CliLimits, EmptyValuesNameTheOption) {
  expect_refused("plan --model ''", {"--model=''", "expected a value"});
  expect_refused("run --model ''", {"--model=''"});
  expect_refused("plan --kv-cache-dtype ''", {"--kv-cache-dtype=''", "expected a value"});
  expect_refused("run --kv-cache-dtype ''", {"--kv-cache-dtype=''"});
  expect_refused("plan --platform ''", {"--platform=''"});
}

TEST(CliLimits, PlatformWithAHugeComputeCapability) {
  expect_refused("plan --platform cuda:2147483647.0", {"platform='cuda:2147483647.0'", "major 1..99"});
  expect_refused("plan --platform cuda:99999999999999999999.0", {"platform='cuda:99999999999999999999.0'"});
}

TEST(CliLimits, BatchTimesPromptBeyondOneStep) {
  expect_refused("run --batch 2147483647 --prompt-len 2", {"--batch * --prompt-len=2147483647 * 2"});
  expect_refused("run --batch 0", {"--batch=0", "> 0"});
  expect_refused("run --prompt-len 3000000000", {"--prompt-len=3000000000"});
}

TEST(CliLimits, CachesBeyondTheMemoryLimitAreRefusedBeforeAllocation) {
  // 3 layers x 2 kv heads x 64 x bf16 x 2 (K, V) = 1.5 KiB per token: 4 x 16384 tokens need 96 MiB
  // of KV cache alone, and about as much again for the activations.
  expect_refused("run --prompt-len 16384 --batch 4 --memory-limit 64M",
                 {"memory needed=", "at most 64.0 MiB", "--memory-limit=64M", "KV caches", "--batch"});
  expect_refused("run --prompt-len 16384 --batch 4", {"memory needed=", "ATTN_MEMORY_LIMIT=32M"},
                 "ATTN_MEMORY_LIMIT=32M");
  // The flag wins over the environment.
  expect_refused("run --prompt-len 16384 --batch 4 --memory-limit 100M", {"--memory-limit=100M"}, "ATTN_MEMORY_LIMIT=1G");
}

TEST(CliLimits, BadMemoryLimitsNameTheirSource) {
  expect_refused("run --memory-limit 8X", {"--memory-limit='8X'", "8G"});
  expect_refused("run --memory-limit 0", {"--memory-limit='0'"});
  expect_refused("run", {"ATTN_MEMORY_LIMIT='lots'"}, "ATTN_MEMORY_LIMIT=lots");
}

TEST(CliLimits, RunReportsItsEstimateAndBudget) {
  const CliResult r = run_on(tiny_llama(), "run", "--batch 2 --prompt-len 24 --decode-steps 3 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  const json& m = j["memory"];
  EXPECT_EQ(m["estimated_kv_cache_bytes"], j["kv_cache_bytes"]) << m.dump();
  EXPECT_GT(m["estimated_bytes"].get<double>(), j["kv_cache_bytes"].get<double>());
  EXPECT_GE(m["budget_bytes"].get<double>(), m["estimated_bytes"].get<double>());
  EXPECT_NE(m["budget_source"].get<std::string>().find("80% of"), std::string::npos) << m.dump();
}

TEST(CliLimits, HeadDimBeyondEveryBackendIsRefused) {
  json cfg = tiny_llama();
  cfg["head_dim"] = 100000;
  const CliResult r = run_on(cfg, "plan");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.err.find("head_size=100000"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("<= 2048"), std::string::npos) << r.err;
}

TEST(CliLimits, MlaDimsNearIntMaxNameTheDim) {
  // Dims near INT_MAX: the config reader bounds their sum before anything adds them in int.
  json cfg = {{"architectures", {"DeepseekV2ForCausalLM"}}, {"model_type", "deepseek_v2"}, {"hidden_size", 256},
              {"num_hidden_layers", 1}, {"num_attention_heads", 4}, {"num_key_value_heads", 4},
              {"kv_lora_rank", 1 << 30}, {"qk_rope_head_dim", (1 << 30) - 1}, {"qk_nope_head_dim", 128}, {"v_head_dim", 128},
              {"torch_dtype", "bfloat16"}};
  const CliResult r = run_on(cfg, "plan");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.err.find("'kv_lora_rank'=1073741824"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("head_size="), std::string::npos) << r.err;
}

}  // namespace

TEST(CliLimits, ParseErrorsExitOneWithErrorPrefix) {
  // CLI11 would exit 104 (unknown option), 105 (bad conversion), 106 (argument mismatch) with
  // its own text; attn reports them as every other error.
  for (const char* args : {"plan --no-such-flag", "run --threads many", "bench --rounds 0", "frobnicate"}) {
    const CliResult r = attn_cli(args);
    EXPECT_EQ(r.rc, 1) << args << "\n" << r.err;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << args << "\n" << r.err;
  }
  EXPECT_EQ(attn_cli("--help").rc, 0);
  EXPECT_EQ(attn_cli("plan --help").rc, 0);
}

TEST(CliLimits, OversizedOpenMpDefaultIsClamped) {
  // OMP_NUM_THREADS beyond what the runtime can start crashed every parallel region.
  const CliResult r = run_on(tiny_llama(), "run", "", "OMP_NUM_THREADS=100000");
  EXPECT_EQ(r.rc, 0) << r.err;
}
