// Tensor- and pipeline-parallel shares (attn/parallel.hpp): vLLM's head split and KV-head
// replication on the shipped models, errors naming tensor_parallel when heads do not divide,
// MLA's replicated latent cache, mixers' split channels, and vLLM's pipeline layer ranges; and
// no shipped model, whole or sharded, left to the slow reference backend.
#include <gtest/gtest.h>

#include <optional>

#include "attn/attn.hpp"
#include "attn/mamba.hpp"
#include "attn/parallel.hpp"
#include "support/expect_error.hpp"

namespace {

using attn::test::throws_error;

TEST(TensorParallel, Llama31SplitsKvHeadsThenReplicatesThem) {
  const attn::ModelSpec m = attn::load_model("llama-3.1-8b");  // 32 heads, 8 KV heads
  struct Want {
    int tp, heads, kv_heads, replicas;
  };
  for (const Want& w : {Want{1, 32, 8, 1}, Want{2, 16, 4, 1}, Want{4, 8, 2, 1}, Want{8, 4, 1, 1}, Want{16, 2, 1, 2}, Want{32, 1, 1, 4}}) {
    SCOPED_TRACE("tensor_parallel " + std::to_string(w.tp));
    const attn::HeadSharding s = attn::shard_heads(m.layers[0].attention, w.tp);
    EXPECT_EQ(s.num_heads, w.heads);
    EXPECT_EQ(s.num_kv_heads, w.kv_heads);
    EXPECT_EQ(s.kv_head_replicas, w.replicas);
    const attn::ModelSpec rank = attn::shard_model(m, w.tp);
    ASSERT_EQ(rank.layers.size(), m.layers.size());
    for (const auto& l : rank.layers) {
      EXPECT_EQ(l.attention.num_heads, w.heads);
      EXPECT_EQ(l.attention.num_kv_heads, w.kv_heads);
      EXPECT_EQ(l.attention.head_size, 128);
      EXPECT_NO_THROW(l.attention.validate());
    }
    // Every global head on exactly one rank; every KV head on `replicas` ranks; each rank's q
    // heads use only its own KV heads (the GQA groups stay whole).
    std::vector<int> q_owner(32, 0), kv_copies(8, 0);
    for (int r = 0; r < w.tp; ++r) {
      for (int h = 0; h < s.num_heads; ++h) ++q_owner[std::size_t(s.first_head(r) + h)];
      for (int k = 0; k < s.num_kv_heads; ++k) ++kv_copies[std::size_t(s.first_kv_head(r) + k)];
      const int group = 32 / 8;
      for (int h = 0; h < s.num_heads; ++h) {
        const int kv = (s.first_head(r) + h) / group;
        EXPECT_GE(kv, s.first_kv_head(r));
        EXPECT_LT(kv, s.first_kv_head(r) + s.num_kv_heads);
      }
    }
    for (int n : q_owner) EXPECT_EQ(n, 1);
    for (int n : kv_copies) EXPECT_EQ(n, w.replicas);
  }
}

TEST(TensorParallel, HeadsThatDoNotDivideNameTheArgumentAndTheHeads) {
  const attn::ModelSpec qwen = attn::load_model("qwen2.5-7b");  // 28 heads, 4 KV heads
  EXPECT_TRUE(throws_error([&] { attn::shard_model(qwen, 8); }, {"tensor_parallel=8", "num_heads=28", "layer 0", "qwen2.5-7b"}));
  EXPECT_TRUE(throws_error([&] { attn::shard_model(qwen, 3); }, {"tensor_parallel=3", "num_heads=28"}));
  EXPECT_NO_THROW(attn::shard_model(qwen, 4));
  EXPECT_NO_THROW(attn::shard_model(qwen, 28));  // 1 head per rank, each KV head on 7 ranks
  EXPECT_EQ(attn::shard_heads(qwen.layers[0].attention, 28).kv_head_replicas, 7);

  attn::LayerConfig c;  // 24 heads, 8 KV heads: 12 ranks divide the heads, not the KV heads
  c.num_heads = 24, c.num_kv_heads = 8;
  EXPECT_TRUE(throws_error([&] { attn::shard_heads(c, 12); }, {"tensor_parallel=12", "multiple of num_kv_heads=8"}));
  c.num_heads = 48, c.num_kv_heads = 12;  // 8 ranks: fewer than 12 KV heads, and 8 does not divide 12
  EXPECT_TRUE(throws_error([&] { attn::shard_heads(c, 8); }, {"tensor_parallel=8", "num_kv_heads=12"}));
  EXPECT_TRUE(throws_error([&] { attn::shard_heads(c, 0); }, {"tensor_parallel=0", "> 0"}));
}

TEST(TensorParallel, MlaSplitsHeadsAndReplicatesTheLatentCache) {
  for (const char* name : {"deepseek-v3", "deepseek-v3.2", "deepseek-v2-lite"}) {
    SCOPED_TRACE(name);
    const attn::ModelSpec m = attn::load_model(name);
    const attn::LayerConfig& whole = m.layers[0].attention;
    ASSERT_TRUE(whole.use_mla);
    for (int tp : {2, 4, 8, 16}) {
      const attn::HeadSharding s = attn::shard_heads(whole, tp);
      EXPECT_EQ(s.num_heads, whole.num_heads / tp);
      EXPECT_EQ(s.num_kv_heads, 1);
      EXPECT_EQ(s.kv_head_replicas, tp);
      const attn::LayerConfig rank = attn::shard_layer_config(whole, tp);
      EXPECT_EQ(rank.head_size, whole.head_size);  // the latent entry is whole on every rank
      EXPECT_EQ(rank.kv_lora_rank, whole.kv_lora_rank);
      EXPECT_EQ(rank.index_topk, whole.index_topk);
    }
  }
}

TEST(TensorParallel, MixersSplitHeadsAndChannels) {
  const attn::ModelSpec next = attn::load_model("qwen3-next-80b-a3b");  // GDN: 16 key heads, 32 value heads
  const attn::ModelSpec next4 = attn::shard_model(next, 4);
  for (std::size_t i = 0; i < next.layers.size(); ++i) {
    const auto& l = next4.layers[i];
    if (l.kind != attn::LayerKind::mixer) {
      EXPECT_EQ(l.attention.num_heads, 4);
      EXPECT_EQ(l.attention.num_kv_heads, 1);  // 2 KV heads over 4 ranks: replicated
      continue;
    }
    EXPECT_EQ(l.mixer_dims.at("num_k_heads"), 4);
    EXPECT_EQ(l.mixer_dims.at("num_heads"), 8);
    EXPECT_EQ(l.mixer_dims.at("head_k_dim"), next.layers[i].mixer_dims.at("head_k_dim"));
    EXPECT_NO_THROW(attn::MixerConfig::from_dims(l.mixer, l.mixer_dims).validate());
  }
  const attn::ModelSpec jamba = attn::load_model("jamba-1.5-mini");
  const attn::ModelSpec jamba8 = attn::shard_model(jamba, 8);
  for (std::size_t i = 0; i < jamba.layers.size(); ++i) {
    if (jamba.layers[i].kind != attn::LayerKind::mixer) continue;
    EXPECT_EQ(jamba8.layers[i].mixer_dims.at("d_inner") * 8, jamba.layers[i].mixer_dims.at("d_inner"));
    EXPECT_EQ(jamba8.layers[i].mixer_dims.at("d_state"), jamba.layers[i].mixer_dims.at("d_state"));
  }

  attn::ModelLayer m2;  // Mamba-2: one group is replicated, several are split
  m2.kind = attn::LayerKind::mixer, m2.mixer = attn::MambaType::mamba2;
  m2.mixer_dims = {{"d_inner", 4096}, {"num_heads", 64}, {"head_dim", 64}, {"d_state", 128}, {"n_groups", 1}, {"d_conv", 4}};
  EXPECT_EQ(attn::shard_layer(m2, 8).mixer_dims.at("n_groups"), 1);
  EXPECT_EQ(attn::shard_layer(m2, 8).mixer_dims.at("num_heads"), 8);
  m2.mixer_dims["n_groups"] = 8;
  EXPECT_EQ(attn::shard_layer(m2, 4).mixer_dims.at("n_groups"), 2);
  m2.mixer_dims["n_groups"] = 2;
  EXPECT_TRUE(throws_error([&] { attn::shard_layer(m2, 4); }, {"tensor_parallel=4", "n_groups=2"}));
  EXPECT_TRUE(throws_error([&] { attn::shard_layer(m2, 3); }, {"tensor_parallel=3", "d_inner=4096", "mamba2"}));
}

TEST(TensorParallel, EveryShippedModelAtOneTwoFourEightRanks) {
  // The models whose heads (or channels) 8 ranks do not divide: vLLM refuses them too.
  const std::map<std::string, std::string> refuses_8 = {{"qwen2.5-7b", "num_heads=28"}, {"bert-base-uncased", "num_heads=12"}};
  for (const auto& name : attn::builtin_models()) {
    const attn::ModelSpec m = attn::load_model(name);
    for (int tp : {1, 2, 4, 8}) {
      SCOPED_TRACE(name + " tensor_parallel " + std::to_string(tp));
      if (tp == 8 && refuses_8.count(name)) {
        EXPECT_TRUE(throws_error([&] { attn::shard_model(m, tp); }, {"tensor_parallel=8", refuses_8.at(name)}));
        continue;
      }
      const attn::ModelSpec rank = attn::shard_model(m, tp);
      for (std::size_t i = 0; i < m.layers.size(); ++i) {
        const auto& whole = m.layers[i];
        const auto& part = rank.layers[i];
        if (whole.kind == attn::LayerKind::mixer) {
          EXPECT_NO_THROW(attn::MixerConfig::from_dims(part.mixer, part.mixer_dims).validate());
          continue;
        }
        if (whole.attention.is_attention_free) continue;
        EXPECT_EQ(part.attention.num_heads * tp, whole.attention.num_heads);
        EXPECT_NO_THROW(part.attention.validate());
        // The whole layer's KV heads are all held somewhere, and no rank holds more than its share.
        const attn::HeadSharding s = attn::shard_heads(whole.attention, tp);
        if (!whole.attention.use_mla) {
          EXPECT_EQ(s.num_kv_heads * tp, whole.attention.num_kv_heads * s.kv_head_replicas);
        }
      }
    }
  }
}

TEST(PipelineParallel, StagesFollowVllmsSplit) {
  auto ranges = [](int layers, int pp) {
    std::vector<std::pair<int, int>> out;
    for (const auto& r : attn::pipeline_stages(layers, pp)) out.emplace_back(r.begin, r.end);
    return out;
  };
  using V = std::vector<std::pair<int, int>>;
  EXPECT_EQ(ranges(32, 1), (V{{0, 32}}));
  EXPECT_EQ(ranges(32, 4), (V{{0, 8}, {8, 16}, {16, 24}, {24, 32}}));
  // 61 layers (DeepSeek V3) on 4 stages: 15 each, the one left over to the stage before the last.
  EXPECT_EQ(ranges(61, 4), (V{{0, 15}, {15, 30}, {30, 46}, {46, 61}}));
  EXPECT_EQ(ranges(10, 4), (V{{0, 2}, {2, 5}, {5, 8}, {8, 10}}));  // two left over: the two stages before the last
  EXPECT_TRUE(throws_error([&] { attn::pipeline_stages(4, 5); }, {"pipeline_parallel=5", "<= 4"}));
  EXPECT_TRUE(throws_error([&] { attn::pipeline_stages(4, 0); }, {"pipeline_parallel=0"}));
}

// No shipped model leaves a layer to the slow oracle, at its own dtype or float32 / float16, on
// this CPU or the portable planning targets, whole or as one of 8 tensor-parallel ranks.
TEST(NoOracleLayers, EveryShippedModelIsServedByAProductionBackend) {
  std::vector<attn::SelectOptions> targets(3);
  targets[1].platform = attn::parse_platform("cpu:avx2");
  targets[2].platform = attn::parse_platform("cpu");
  for (auto& t : targets) t.use_env = false;
  for (const auto& name : attn::builtin_models()) {
    for (std::optional<attn::DType> dtype : {std::optional<attn::DType>{}, std::optional{attn::DType::float32},
                                             std::optional{attn::DType::float16}}) {
      attn::ModelOverrides o;
      o.dtype = dtype;
      const attn::ModelSpec whole = attn::load_model(name, o);
      std::vector<attn::ModelSpec> shares = {whole};
      if (name != "qwen2.5-7b" && name != "bert-base-uncased") shares.push_back(attn::shard_model(whole, 8));
      for (const auto& m : shares)
        for (const auto& l : m.layers) {
          if (l.kind != attn::LayerKind::attention) continue;
          for (const auto& t : targets) {
            const attn::Decision d = attn::explain(l.attention, t);
            EXPECT_FALSE(d.backend.empty()) << name << " layer " << l.index << " on " << d.platform;
            EXPECT_TRUE(d.slow_path.empty()) << name << " layer " << l.index << " on " << d.platform << ": " << d.backend;
          }
        }
    }
  }
}

}  // namespace
