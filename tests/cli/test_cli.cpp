// The `attn` binary end to end: exit codes, stderr for errors, and the JSON schemas.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

struct CliResult {
  int rc = -1;
  std::string out, err;
};

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// Runs `attn <args>` (arguments are trusted test literals), capturing stdout and stderr.
CliResult attn_cli(const std::string& args) {
  static int counter = 0;
  const fs::path err_file = fs::temp_directory_path() / ("attn_cli_test_" + std::to_string(::getpid()) + "_" +
                                                         std::to_string(counter++) + ".err");
  const std::string cmd = "ATTN_LOG=error '" + std::string(ATTN_CLI_PATH) + "' " + args + " 2>'" + err_file.string() + "'";
  CliResult r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  const int status = ::pclose(pipe);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = read_all(err_file);
  fs::remove(err_file);
  return r;
}

/// A small decoder config on disk, so `attn run` finishes in well under a second.
fs::path tiny_model(const std::string& name, const json& cfg) {
  const fs::path p = fs::temp_directory_path() / ("attn_cli_" + std::to_string(::getpid()) + "_" + name + ".json");
  std::ofstream(p) << cfg.dump();
  return p;
}

json tiny_llama() {
  return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", 256},
          {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"num_hidden_layers", 3}, {"torch_dtype", "bfloat16"}};
}

void expect_candidate_schema(const json& c) {
  ASSERT_TRUE(c["backend"].is_string());
  ASSERT_TRUE(c["valid"].is_boolean());
  ASSERT_TRUE(c["priority"].is_number_integer());
  ASSERT_TRUE(c["reasons"].is_array());
  for (const auto& r : c["reasons"]) {
    EXPECT_TRUE(r["field"].is_string());
    EXPECT_TRUE(r["value"].is_string());
    EXPECT_TRUE(r["expected"].is_string());
  }
  EXPECT_EQ(c["valid"].get<bool>(), c["reasons"].empty()) << c.dump();
}

TEST(Cli, BackendsJsonListsReferenceAsLoadable) {
  CliResult r = attn_cli("backends --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  ASSERT_TRUE(j["platform"].is_string());
  bool found = false;
  for (const auto& b : j["backends"]) {
    EXPECT_TRUE(b["capabilities"]["dtypes"].is_array());
    EXPECT_TRUE(b["capabilities"]["head_sizes"].is_string());
    EXPECT_TRUE(b["loadable"].is_boolean());
    if (b["name"] == "reference") {
      found = true;
      EXPECT_TRUE(b["loadable"].get<bool>());
    }
  }
  EXPECT_TRUE(found) << r.out;
}

TEST(Cli, PlanJsonFollowsTheIssueSchema) {
  CliResult r = attn_cli("plan --model llama-3.1-8b --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  ASSERT_TRUE(j["platform"].is_string());
  ASSERT_EQ(j["groups"].size(), 1u);  // 32 identical layers: one group
  const json& g = j["groups"][0];
  std::vector<int> all(32);
  for (int i = 0; i < 32; ++i) all[size_t(i)] = i;
  EXPECT_EQ(g["layers"].get<std::vector<int>>(), all);
  EXPECT_EQ(g["config"]["num_heads"], 32);
  EXPECT_EQ(g["config"]["head_size"], 128);
  const std::string chosen = g["backend"].get<std::string>();
  ASSERT_FALSE(chosen.empty());
  bool chosen_listed = false;
  for (const auto& c : g["candidates"]) {
    expect_candidate_schema(c);
    if (c["backend"] == chosen) chosen_listed = c["valid"].get<bool>();
  }
  EXPECT_TRUE(chosen_listed);
}

TEST(Cli, PlanTextGroupsAlternatingLayersCompactly) {
  CliResult r = attn_cli("plan --model gemma-2-9b");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("layers 0,2,4,...,40 (21 attention)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("layers 1,3,5,...,41 (21 attention)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("window 4096"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("soft-cap 50"), std::string::npos) << r.out;
}

TEST(Cli, PlanShowsMixerLayersOfHybrids) {
  CliResult r = attn_cli("plan --model jamba-1.5-mini --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  int attention = 0, mixer = 0;
  for (const auto& g : j["groups"]) {
    (g["kind"] == "attention" ? attention : mixer) += int(g["layers"].size());
    if (g["kind"] == "mixer") EXPECT_EQ(g["mixer"], "mamba1");
  }
  EXPECT_EQ(attention, 4);
  EXPECT_EQ(mixer, 28);
}

TEST(Cli, ForcedBackendThatCannotServeExitsNonZeroWithReasonsAndAlternatives) {
  CliResult r = attn_cli("plan --model llama-3.1-8b --backend no_attention");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("no_attention"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("reference"), std::string::npos) << r.err;  // an alternative that serves it
  EXPECT_NE(r.err.find("layers 0-31"), std::string::npos) << r.err;
}

TEST(Cli, ErrorsGoToStderrWithNonZeroExit) {
  CliResult r = attn_cli("plan --model llama-3.1-8b --backend no_such_backend");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("no_such_backend"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("reference"), std::string::npos) << r.err;  // lists the known ones

  r = attn_cli("plan --model no-such-model");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("llama-3.1-8b"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;

  r = attn_cli("plan --model llama-3.1-8b --kv-cache-dtype fp7");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("fp8_e4m3"), std::string::npos) << r.err;  // the valid values

  r = attn_cli("plan");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--model"), std::string::npos) << r.err;
}

TEST(Cli, PlanForAnotherPlatform) {
  CliResult r = attn_cli("plan --model llama-3.1-8b --platform cuda:9.0 --json");
  json j = json::parse(r.out.empty() ? "{}" : r.out);
  ASSERT_TRUE(j.contains("groups")) << r.err;
  for (const auto& c : j["groups"][0]["candidates"]) {
    if (c["backend"] != "reference") continue;
    ASSERT_FALSE(c["valid"].get<bool>());
    EXPECT_EQ(c["reasons"][0]["field"], "platform");
  }
}

TEST(Cli, RunJsonOnATinyModel) {
  const fs::path model = tiny_model("tiny_llama", tiny_llama());
  CliResult r = attn_cli("run --model '" + model.string() + "' --batch 2 --prompt-len 24 --decode-steps 3 --json");
  fs::remove(model);
  ASSERT_EQ(r.rc, 0) << r.err << r.out;
  json j = json::parse(r.out);
  EXPECT_EQ(j["attention_layers"], 3);
  EXPECT_EQ(j["prefill"]["tokens"], 48);
  EXPECT_EQ(j["decode"]["tokens"], 6);
  EXPECT_GT(j["prefill"]["tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(j["decode"]["tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(j["cache_bytes"].get<double>(), 0.0);
  ASSERT_TRUE(j["spot_check"].is_object()) << j.dump();
  EXPECT_TRUE(j["spot_check"]["passed"].get<bool>()) << j["spot_check"].dump();
  EXPECT_EQ(j["spot_check"]["reference"], "reference");
  EXPECT_EQ(j["groups"].size(), 1u);
}

TEST(Cli, RunForcedOntoTheReference) {
  const fs::path model = tiny_model("tiny_ref", tiny_llama());
  CliResult r = attn_cli("run --model '" + model.string() + "' --batch 1 --prompt-len 8 --decode-steps 1 --backend reference");
  fs::remove(model);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("tokens/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("spot check: layer 0 (reference)"), std::string::npos) << r.out;
}

TEST(Cli, RunOfAnAttentionFreeModelSkipsItsMixers) {
  json cfg = {{"architectures", {"MambaForCausalLM"}}, {"model_type", "mamba"}, {"hidden_size", 64},
              {"num_hidden_layers", 2}, {"state_size", 4}, {"conv_kernel", 4}};
  const fs::path model = tiny_model("tiny_mamba", cfg);
  CliResult r = attn_cli("run --model '" + model.string() + "' --batch 1 --prompt-len 4 --decode-steps 1 --json");
  fs::remove(model);
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["attention_layers"], 0);
  EXPECT_EQ(j["mixer_layers_skipped"], 2);
  EXPECT_TRUE(j["spot_check"].is_null());
}

TEST(Cli, CheckPassesForEveryAvailableBackend) {
  CliResult r = attn_cli("check --json");
  ASSERT_EQ(r.rc, 0) << r.err << r.out;
  json j = json::parse(r.out);
  EXPECT_TRUE(j["passed"].get<bool>());
  for (const auto& res : j["results"]) EXPECT_EQ(res["status"], "pass") << res.dump();
}

TEST(Cli, BenchIsDeclared) {
  CliResult r = attn_cli("bench --help");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("--quick"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--csv"), std::string::npos) << r.out;
}

}  // namespace
