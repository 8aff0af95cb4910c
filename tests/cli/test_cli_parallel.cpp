// `attn plan --tensor-parallel / --pipeline-parallel` and `attn run --tensor-parallel --rank`:
// per-rank shapes, KV bytes per token per rank, errors for heads that do not divide, and the
// mark on layers the slow reference serves.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_runner.hpp"

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

using namespace attn::cli_test;  // attn_cli, CliResult, tiny_model, tiny_llama

json plan_json(const std::string& args) {
  CliResult r = attn_cli("plan " + args + " --json");
  EXPECT_EQ(r.rc, 0) << r.err;
  return json::parse(r.out.empty() ? "{}" : r.out);
}

TEST(CliParallel, Llama31PerRankHeadsAndKvBytes) {
  struct Want {
    int tp, heads, kv_heads, replicas;
  };
  for (const Want& w : {Want{1, 32, 8, 1}, Want{2, 16, 4, 1}, Want{4, 8, 2, 1}, Want{8, 4, 1, 1}, Want{16, 2, 1, 2}}) {
    SCOPED_TRACE("tensor parallel " + std::to_string(w.tp));
    const json j = plan_json("--model llama-3.1-8b --tensor-parallel " + std::to_string(w.tp));
    EXPECT_EQ(j["tensor_parallel"], w.tp);
    ASSERT_EQ(j["groups"].size(), 1u);
    const json& g = j["groups"][0];
    EXPECT_EQ(g["backend"], "cpu_flash");
    EXPECT_EQ(g["config"]["num_heads"], w.heads);
    EXPECT_EQ(g["config"]["num_kv_heads"], w.kv_heads);
    EXPECT_EQ(g["sharding"]["kv_head_replicas"], w.replicas);
    EXPECT_EQ(g["sharding"]["total_num_kv_heads"], 8);
    EXPECT_FALSE(g["slow_reference_path"].get<bool>());
    // K and V, 128 bf16 values per KV head, per layer; 32 layers in the one stage.
    const int64_t per_layer = int64_t(w.kv_heads) * 128 * 2 * 2;
    EXPECT_EQ(g["kv_bytes_per_token"], per_layer);
    ASSERT_EQ(j["stages"].size(), 1u);
    EXPECT_EQ(j["stages"][0]["kv_bytes_per_token_per_rank"], 32 * per_layer);
  }
  CliResult r = attn_cli("plan --model llama-3.1-8b --tensor-parallel 16");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("2 of 32 heads, 1 of 8 KV heads per rank (each KV head replicated on 2 ranks)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 1: heads 2-3, KV head 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 15: heads 30-31, KV head 7"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("512 bytes per token per layer per rank"), std::string::npos) << r.out;
}

TEST(CliParallel, HeadsThatDoNotDivideFailNamingTheValues) {
  CliResult r = attn_cli("plan --model qwen2.5-7b --tensor-parallel 8");  // 28 heads
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("tensor_parallel=8 invalid: expected a divisor of num_heads=28"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  r = attn_cli("plan --model llama-3.1-8b --tensor-parallel 0");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--tensor-parallel=0 invalid"), std::string::npos) << r.err;
  r = attn_cli("plan --model llama-3.1-8b --pipeline-parallel 33");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--pipeline-parallel=33 invalid: expected > 0 and <= 32"), std::string::npos) << r.err;
}

TEST(CliParallel, DeepSeekMlaSplitsHeadsAndKeepsTheLatentCacheOnEveryRank) {
  const json j = plan_json("--model deepseek-v3 --tensor-parallel 8 --pipeline-parallel 4");
  ASSERT_EQ(j["groups"].size(), 1u);
  const json& g = j["groups"][0];
  EXPECT_EQ(g["backend"], "cpu_mla");
  EXPECT_EQ(g["config"]["num_heads"], 16);
  EXPECT_EQ(g["sharding"]["kv_head_replicas"], 8);
  EXPECT_EQ(g["kv_bytes_per_token"], 576 * 2);  // the whole latent entry, bf16
  // 61 layers on 4 stages: 15, 15, 16, 15 (vLLM gives the extra layer to the stage before the last).
  ASSERT_EQ(j["stages"].size(), 4u);
  EXPECT_EQ(j["stages"][2]["layers"], json({30, 46}));
  EXPECT_EQ(j["stages"][2]["ranks"], json({16, 24}));
  EXPECT_EQ(j["stages"][2]["kv_bytes_per_token_per_rank"], 16 * 576 * 2);
  CliResult r = attn_cli("plan --model deepseek-v3 --tensor-parallel 8");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("16 of 128 heads, the latent cache (one entry per token) on every rank"), std::string::npos) << r.out;
}

TEST(CliParallel, EveryShippedHybridPlansAtEightRanks) {
  for (const char* name : {"jamba-1.5-mini", "qwen3-next-80b-a3b", "lfm2-1.2b", "mamba-130m"}) {
    SCOPED_TRACE(name);
    const json j = plan_json(std::string("--model ") + name + " --tensor-parallel 8");
    for (const auto& g : j["groups"]) {
      if (g["kind"] == "mixer") {
        EXPECT_GT(g["state_bytes_per_sequence"].get<int64_t>(), 0);
      } else {
        EXPECT_GT(g["kv_bytes_per_token"].get<int64_t>(), 0);
      }
    }
  }
}

TEST(CliParallel, PlanMarksLayersTheSlowReferenceServes) {
  json cfg = tiny_llama();
  cfg["hidden_size"] = 4 * 300;  // head size 300: no production CPU backend
  const fs::path model = tiny_model("tiny_wide_heads", cfg);
  CliResult r = attn_cli("plan --model '" + model.string() + "'");
  const json j = plan_json("--model '" + model.string() + "'");
  fs::remove(model);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("reference, block size 16  <- slow reference path"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("slow reference path: reference is the correctness oracle"), std::string::npos) << r.out;
  EXPECT_TRUE(j["groups"][0]["slow_reference_path"].get<bool>());
}

TEST(CliParallel, RunOneRanksShare) {
  const fs::path model = tiny_model("tiny_tp", tiny_llama());  // 4 heads, 2 KV heads
  CliResult r = attn_cli("run --model '" + model.string() + "' --batch 2 --prompt-len 20 --decode-steps 2 --tensor-parallel 2 --rank 1 --json");
  CliResult bad = attn_cli("run --model '" + model.string() + "' --tensor-parallel 2 --rank 2");
  CliResult text = attn_cli("run --model '" + model.string() + "' --batch 1 --prompt-len 8 --decode-steps 1 --tensor-parallel 4 --rank 3");
  fs::remove(model);
  ASSERT_EQ(r.rc, 0) << r.err << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["tensor_parallel"], 2);
  EXPECT_EQ(j["rank"], 1);
  EXPECT_EQ(j["groups"][0]["config"]["num_heads"], 2);
  EXPECT_EQ(j["groups"][0]["config"]["num_kv_heads"], 1);
  ASSERT_TRUE(j["spot_check"].is_object()) << j.dump();
  EXPECT_TRUE(j["spot_check"]["passed"].get<bool>()) << j["spot_check"].dump();
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find("--rank=2 invalid: expected >= 0 and <= 1"), std::string::npos) << bad.err;
  ASSERT_EQ(text.rc, 0) << text.err;
  EXPECT_NE(text.out.find("tensor-parallel rank 3 of 4"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("1 of 4 heads, 1 of 2 KV heads per rank (each KV head replicated on 2 ranks)"), std::string::npos) << text.out;
}

}  // namespace
