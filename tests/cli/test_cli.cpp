// The `attn` binary end to end: exit codes, stderr for errors, and the JSON schemas.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_runner.hpp"

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

using namespace attn::cli_test;  // attn_cli, CliResult, tiny_model, tiny_llama

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
    if (g["kind"] == "mixer") { EXPECT_EQ(g["mixer"], "mamba1"); }
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

TEST(Cli, PlanForAGpuLeavesTheCpuMixersOut) {
  // Every mixer backend is a CPU one: on a CUDA target jamba's mixer layers have no backend, and
  // the plan says why (the platform) instead of assigning a CPU mixer.
  CliResult r = attn_cli("plan --model jamba-1.5-mini --platform cuda:9.0 --json");
  EXPECT_NE(r.rc, 0);
  json j = json::parse(r.out.empty() ? "{}" : r.out);
  ASSERT_TRUE(j.contains("groups")) << r.err;
  int mixer_groups = 0;
  for (const auto& g : j["groups"]) {
    if (g["kind"] != "mixer") continue;
    ++mixer_groups;
    EXPECT_EQ(g["backend"], "");
    EXPECT_NE(g["error"].get<std::string>().find("no backend"), std::string::npos) << g.dump();
    for (const auto& c : g["candidates"]) {
      expect_candidate_schema(c);
      ASSERT_FALSE(c["valid"].get<bool>());
      EXPECT_EQ(c["reasons"][0]["field"], "platform");
      EXPECT_EQ(c["reasons"][0]["value"], "cuda");
      if (c["backend"] == "mamba1") { EXPECT_EQ(c["reasons"].size(), 1u) << c.dump(); }
    }
  }
  EXPECT_EQ(mixer_groups, 1);
  r = attn_cli("plan --model jamba-1.5-mini --platform cuda:9.0");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("(28 mixer): NO BACKEND"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("platform=cuda, expected cpu"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("no backend can serve layers 0-3,"), std::string::npos) << r.err;
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
  EXPECT_GT(j["kv_cache_bytes"].get<double>(), 0.0);
  EXPECT_EQ(j["state_cache_bytes"], 0);
  EXPECT_TRUE(j["mixer_spot_check"].is_null());
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

json tiny_mamba() {
  return {{"architectures", {"MambaForCausalLM"}}, {"model_type", "mamba"}, {"hidden_size", 64},
          {"num_hidden_layers", 2}, {"state_size", 4}, {"conv_kernel", 4}};
}

/// Jamba's layout at toy size: layer 2 of every 4 is attention, the rest Mamba-1 mixers.
json tiny_jamba() {
  return {{"architectures", {"JambaForCausalLM"}}, {"model_type", "jamba"}, {"hidden_size", 64},
          {"num_hidden_layers", 8}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"attn_layer_period", 4},
          {"attn_layer_offset", 2}, {"mamba_d_state", 4}, {"mamba_d_conv", 4}, {"mamba_expand", 2},
          {"torch_dtype", "bfloat16"}};
}

json run_json(const std::string& name, const json& cfg, const std::string& sizes) {
  const fs::path model = tiny_model(name, cfg);
  CliResult r = attn_cli("run --model '" + model.string() + "' " + sizes + " --json");
  fs::remove(model);
  EXPECT_EQ(r.rc, 0) << r.err << r.out;
  return json::parse(r.out.empty() ? "{}" : r.out);
}

void expect_phase(const json& phase, int64_t tokens) {
  EXPECT_EQ(phase["tokens"], tokens) << phase.dump();
  EXPECT_GT(phase["seconds"].get<double>(), 0.0) << phase.dump();
  EXPECT_GT(phase["tokens_per_s"].get<double>(), 0.0) << phase.dump();
}

void expect_mixer_check_passed(const json& c, int layer, const std::string& backend) {
  ASSERT_TRUE(c.is_object()) << c.dump();
  EXPECT_EQ(c["layer"], layer);
  EXPECT_EQ(c["backend"], backend);
  EXPECT_TRUE(c["passed"].get<bool>()) << c.dump();
  EXPECT_GT(c["values_compared"].get<int64_t>(), 0);
  EXPECT_NE(c["reference"].get<std::string>().find("one token per call"), std::string::npos) << c.dump();
}

TEST(Cli, RunOfAnAttentionFreeModelRunsEveryMixerLayer) {
  json j = run_json("tiny_mamba", tiny_mamba(), "--batch 2 --prompt-len 5 --decode-steps 3");
  EXPECT_EQ(j["attention_layers"], 0);
  EXPECT_EQ(j["mixer_layers"], 2);
  EXPECT_EQ(j["decode_steps"], 3);  // mixers decode: the model is a decoder without attention
  expect_phase(j["prefill"], 10);
  expect_phase(j["decode"], 6);
  expect_phase(j["by_kind"]["mixer"]["prefill"], 10);
  expect_phase(j["by_kind"]["mixer"]["decode"], 6);
  EXPECT_EQ(j["by_kind"]["attention"]["layers"], 0);
  EXPECT_EQ(j["kv_cache_bytes"], 0);
  // Two layers, two slots each: conv [128, 3] + ssm [128, 4] floats per slot.
  EXPECT_EQ(j["state_cache_bytes"], 2 * 2 * (128 * 3 + 128 * 4) * 4);
  EXPECT_TRUE(j["spot_check"].is_null());
  EXPECT_TRUE(j["spot_check_skipped"].is_string());
  expect_mixer_check_passed(j["mixer_spot_check"], 0, "mamba1");
  EXPECT_EQ(j["mixer_spot_check"]["steps"], 4);  // the prefill and 3 decode steps
  ASSERT_EQ(j["groups"].size(), 1u);
  EXPECT_EQ(j["groups"][0]["state_slots"], 2);
}

TEST(Cli, RunOfAHybridModelRunsAttentionAndMixers) {
  json j = run_json("tiny_jamba", tiny_jamba(), "--batch 2 --prompt-len 12 --decode-steps 2");
  EXPECT_EQ(j["attention_layers"], 2);
  EXPECT_EQ(j["mixer_layers"], 6);
  for (const char* kind : {"attention", "mixer"}) {
    SCOPED_TRACE(kind);
    expect_phase(j["by_kind"][kind]["prefill"], 24);
    expect_phase(j["by_kind"][kind]["decode"], 4);
  }
  const double total = j["prefill"]["seconds"].get<double>();
  EXPECT_DOUBLE_EQ(total, j["by_kind"]["attention"]["prefill"]["seconds"].get<double>() +
                              j["by_kind"]["mixer"]["prefill"]["seconds"].get<double>());
  EXPECT_GT(j["kv_cache_bytes"].get<double>(), 0.0);
  EXPECT_GT(j["state_cache_bytes"].get<double>(), 0.0);
  ASSERT_TRUE(j["spot_check"].is_object()) << j.dump();
  EXPECT_EQ(j["spot_check"]["layer"], 2);
  EXPECT_TRUE(j["spot_check"]["passed"].get<bool>()) << j["spot_check"].dump();
  expect_mixer_check_passed(j["mixer_spot_check"], 0, "mamba1");
  int mixer_groups = 0;
  for (const auto& g : j["groups"]) {
    if (g["kind"] != "mixer") continue;
    ++mixer_groups;
    EXPECT_EQ(g["backend"], "mamba1");
    EXPECT_EQ(g["layers"].get<std::vector<int>>(), (std::vector<int>{0, 1, 3, 4, 5, 7}));
    EXPECT_GT(g["state_bytes_per_layer"].get<double>(), 0.0);
  }
  EXPECT_EQ(mixer_groups, 1);
}

TEST(Cli, RunChecksAChunkedMixerAgainstItsSequentialRecurrence) {
  json cfg = {{"architectures", {"Mamba2ForCausalLM"}}, {"model_type", "mamba2"}, {"hidden_size", 64},
              {"num_hidden_layers", 1}, {"state_size", 8}, {"conv_kernel", 4}, {"num_heads", 4}, {"head_dim", 32}};
  // 70 prompt tokens: more than one 64-token chunk, so the chunked form really runs.
  json j = run_json("tiny_mamba2", cfg, "--batch 2 --prompt-len 70 --decode-steps 2");
  expect_mixer_check_passed(j["mixer_spot_check"], 0, "mamba2");
  EXPECT_NE(j["mixer_spot_check"]["reference"].get<std::string>().find("chunk_size 0"), std::string::npos);
}

TEST(Cli, RunReportsTheMlaFormOfEachPhase) {
  // DeepSeek-V2-Lite's attention at toy depth: 2 layers, 16 heads, latent 512 + rope 64.
  json cfg = {{"architectures", {"DeepseekV2ForCausalLM"}}, {"model_type", "deepseek_v2"}, {"hidden_size", 256},
              {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 4},
              {"kv_lora_rank", 512}, {"qk_rope_head_dim", 64}, {"qk_nope_head_dim", 128}, {"v_head_dim", 128},
              {"torch_dtype", "bfloat16"}};
  // A 400-token prompt makes the expanded form cheaper; decode stays absorbed.
  json j = run_json("tiny_deepseek", cfg, "--batch 1 --prompt-len 400 --decode-steps 1");
  ASSERT_EQ(j["groups"].size(), 1u) << j.dump();
  const json& g = j["groups"][0];
  EXPECT_EQ(g["backend"], "cpu_mla");
  EXPECT_EQ(g["mla_form"]["prefill"], "expanded") << g.dump();
  EXPECT_EQ(g["mla_form"]["decode"], "absorbed") << g.dump();
  EXPECT_TRUE(j["spot_check"]["passed"].get<bool>()) << j["spot_check"].dump();
  ASSERT_TRUE(j["mla_expanded_check"].is_object()) << j.dump();
  EXPECT_TRUE(j["mla_expanded_check"]["passed"].get<bool>()) << j["mla_expanded_check"].dump();
}

TEST(Cli, CheckPassesForEveryAvailableBackend) {
  CliResult r = attn_cli("check --json");
  ASSERT_EQ(r.rc, 0) << r.err << r.out;
  json j = json::parse(r.out);
  EXPECT_TRUE(j["passed"].get<bool>());
  for (const auto& res : j["results"]) EXPECT_EQ(res["status"], "pass") << res.dump();
}

TEST(Cli, BenchQuickMixerFiguresInJson) {
  CliResult r = attn_cli("bench --quick --filter mixer --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  const double rw = j["ceiling.dram_read_write_gbs"].get<double>();
  EXPECT_GT(rw, 0.0);
  EXPECT_FALSE(j["ceiling.dram_read_write_instruction"].get<std::string>().empty());
  for (const char* mixer : {"mamba1", "mamba2", "short_conv", "linear", "gdn"}) {
    SCOPED_TRACE(mixer);
    const std::string decode = std::string("mixer.decode.") + mixer;
    ASSERT_TRUE(j.contains(decode + ".state_GBps")) << j.dump();
    EXPECT_GT(j[decode + ".us_per_step"].get<double>(), 0.0);
    // State bytes read + written, against this run's in-place read + write ceiling.
    EXPECT_NEAR(j[decode + ".fraction_of_dram_read_write"].get<double>(), j[decode + ".state_GBps"].get<double>() / rw, 1e-9);
  }
  for (const char* mixer : {"mamba2", "linear", "gdn"}) {
    EXPECT_GT(j[std::string("mixer.prefill.") + mixer + ".chunked_speedup"].get<double>(), 0.0) << mixer;
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    // The filter keeps the attention shapes and the MLA set out.
    const bool ceiling_or_mixer = it.key().rfind("ceiling.", 0) == 0 || it.key().rfind("mixer.", 0) == 0 || it.key() == "threads";
    EXPECT_TRUE(ceiling_or_mixer) << it.key();
  }
}

TEST(Cli, BenchIsDeclared) {
  CliResult r = attn_cli("bench --help");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("--quick"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--csv"), std::string::npos) << r.out;
}

}  // namespace
