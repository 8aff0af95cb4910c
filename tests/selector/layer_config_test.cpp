// LayerConfig, the selector key: equality and hashing see every field, to_string prints every
// field, kind() follows vLLM's KV-cache spec kinds, and validate() rejects configs no backend
// could mean, naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <unordered_set>

#include "attn/layer_config.hpp"
#include "attn/selector.hpp"
#include "support/expect_error.hpp"

namespace {

using namespace attn;
using attn::test::throws_error;

// One mutation per LayerConfig field (keep in step with layer_config.hpp).
const std::vector<std::pair<const char*, std::function<void(LayerConfig&)>>>& field_mutations() {
  static const std::vector<std::pair<const char*, std::function<void(LayerConfig&)>>> m = {
      {"num_heads", [](LayerConfig& c) { c.num_heads = 16; }},
      {"num_kv_heads", [](LayerConfig& c) { c.num_kv_heads = 4; }},
      {"head_size", [](LayerConfig& c) { c.head_size = 64; }},
      {"head_size_v", [](LayerConfig& c) { c.head_size_v = 64; }},
      {"dtype", [](LayerConfig& c) { c.dtype = DType::float16; }},
      {"kv_cache_dtype", [](LayerConfig& c) { c.kv_cache_dtype = KVCacheDType::fp8; }},
      {"block_size", [](LayerConfig& c) { c.block_size = 16; }},
      {"attn_type", [](LayerConfig& c) { c.attn_type = AttnType::encoder; }},
      {"sliding_window", [](LayerConfig& c) { c.sliding_window = 4096; }},
      {"logits_soft_cap", [](LayerConfig& c) { c.logits_soft_cap = 30.0f; }},
      {"use_alibi", [](LayerConfig& c) { c.use_alibi = true; }},
      {"has_sink", [](LayerConfig& c) { c.has_sink = true; }},
      {"use_mla", [](LayerConfig& c) { c.use_mla = true; }},
      {"use_sparse", [](LayerConfig& c) { c.use_sparse = true; }},
      {"use_mm_prefix", [](LayerConfig& c) { c.use_mm_prefix = true; }},
      {"use_per_head_quant_scales", [](LayerConfig& c) { c.use_per_head_quant_scales = true; }},
      {"is_attention_free", [](LayerConfig& c) { c.is_attention_free = true; }},
      {"use_block_sparse", [](LayerConfig& c) { c.use_block_sparse = true; }},
      {"bs_block_size", [](LayerConfig& c) { c.bs_block_size = 64; }},
      {"bs_local_blocks", [](LayerConfig& c) { c.bs_local_blocks = 16; }},
      {"bs_vert_stride", [](LayerConfig& c) { c.bs_vert_stride = 8; }},
      {"kv_lora_rank", [](LayerConfig& c) { c.kv_lora_rank = 512; }},
      {"qk_rope_head_dim", [](LayerConfig& c) { c.qk_rope_head_dim = 64; }},
      {"qk_nope_head_dim", [](LayerConfig& c) { c.qk_nope_head_dim = 128; }},
      {"v_head_dim", [](LayerConfig& c) { c.v_head_dim = 128; }},
      {"index_topk", [](LayerConfig& c) { c.index_topk = 2048; }},
      {"use_non_causal", [](LayerConfig& c) { c.use_non_causal = true; }},
      {"use_batch_invariant", [](LayerConfig& c) { c.use_batch_invariant = true; }},
      {"use_kv_connector", [](LayerConfig& c) { c.use_kv_connector = true; }},
  };
  return m;
}

TEST(LayerConfigKey, EveryFieldTakesPartInEqualityAndHash) {
  const LayerConfig base;
  std::unordered_set<std::size_t> hashes{base.hash()};
  for (auto& [name, mutate] : field_mutations()) {
    LayerConfig c;
    mutate(c);
    EXPECT_NE(c, base) << name;
    EXPECT_NE(c.hash(), base.hash()) << name;
    hashes.insert(c.hash());
  }
  EXPECT_EQ(hashes.size(), field_mutations().size() + 1) << "single-field changes hash apart from each other";
}

TEST(LayerConfigKey, EqualConfigsHashEqual) {
  LayerConfig a, b;
  a.head_size = b.head_size = 96;
  a.logits_soft_cap = 50.0f;
  b.logits_soft_cap = 50.0f;
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_EQ(LayerConfigHash{}(a), a.hash());
}

TEST(LayerConfigKey, ToStringNamesEveryFieldWithItsValue) {
  LayerConfig c;
  c.head_size = 72;
  c.kv_cache_dtype = KVCacheDType::fp8_e5m2;
  c.has_sink = true;
  c.logits_soft_cap = 30.5f;
  const std::string s = c.to_string();
  EXPECT_EQ(s.rfind("LayerConfig(num_heads=32, ", 0), 0u) << s;
  for (auto& [name, mutate] : field_mutations()) EXPECT_NE(s.find(std::string(name) + "="), std::string::npos) << name;
  EXPECT_NE(s.find("head_size=72"), std::string::npos);
  EXPECT_NE(s.find("kv_cache_dtype=fp8_e5m2"), std::string::npos);
  EXPECT_NE(s.find("has_sink=true"), std::string::npos);
  EXPECT_NE(s.find("logits_soft_cap=30.5"), std::string::npos);
  EXPECT_NE(s.find("dtype=bfloat16"), std::string::npos);
  EXPECT_EQ(s.substr(s.size() - 23), "use_kv_connector=false)");
}

TEST(LayerConfigKey, DerivedAccessors) {
  LayerConfig c;
  EXPECT_EQ(c.effective_head_size_v(), 128);
  c.head_size_v = 64;
  EXPECT_EQ(c.effective_head_size_v(), 64);
  EXPECT_TRUE(c.causal());
  c.use_non_causal = true;
  EXPECT_FALSE(c.causal());
  c.use_non_causal = false;
  c.attn_type = AttnType::encoder_only;
  EXPECT_FALSE(c.causal());
  EXPECT_FALSE(c.has_sliding_window());
}

TEST(LayerConfigKind, FollowsVllmSpecKinds) {
  LayerConfig c;
  EXPECT_EQ(c.kind(), "full_attention");
  c.sliding_window = 128;
  EXPECT_EQ(c.kind(), "sliding_window");
  c.use_mla = true;
  EXPECT_EQ(c.kind(), "sliding_window_mla");
  c.sliding_window = 0;
  EXPECT_EQ(c.kind(), "mla_attention");
  c.attn_type = AttnType::encoder_only;
  EXPECT_EQ(c.kind(), "encoder_only_attention");
  c.attn_type = AttnType::encoder_decoder;
  EXPECT_EQ(c.kind(), "cross_attention");
}

// --- validate(): one test per rejected field ---

void expect_invalid(const std::function<void(LayerConfig&)>& mutate, std::initializer_list<std::string_view> fragments) {
  LayerConfig c;
  mutate(c);
  EXPECT_TRUE(throws_error([&] { c.validate(); }, fragments));
  // The selector validates first: the same error reaches select() callers.
  EXPECT_TRUE(throws_error([&] { select(c); }, fragments));
}

TEST(LayerConfigValidate, DefaultIsValid) { EXPECT_NO_THROW(LayerConfig{}.validate()); }

TEST(LayerConfigValidate, ZeroHeads) {
  expect_invalid([](LayerConfig& c) { c.num_heads = 0; }, {"num_heads=0", "> 0"});
}

TEST(LayerConfigValidate, ZeroKvHeads) {
  expect_invalid([](LayerConfig& c) { c.num_kv_heads = 0; }, {"num_kv_heads=0", "> 0"});
}

TEST(LayerConfigValidate, KvHeadsNotDividingHeads) {
  expect_invalid([](LayerConfig& c) { c.num_heads = 16; c.num_kv_heads = 5; }, {"num_kv_heads=5", "a divisor of num_heads=16"});
}

TEST(LayerConfigValidate, MoreKvHeadsThanHeads) {
  expect_invalid([](LayerConfig& c) { c.num_heads = 4; c.num_kv_heads = 8; }, {"num_kv_heads=8", "a divisor of num_heads=4"});
}

TEST(LayerConfigValidate, ZeroHeadSize) {
  expect_invalid([](LayerConfig& c) { c.head_size = 0; }, {"head_size=0", "> 0"});
}

TEST(LayerConfigValidate, NegativeHeadSizeV) {
  expect_invalid([](LayerConfig& c) { c.head_size_v = -1; }, {"head_size_v=-1", ">= 0"});
}

TEST(LayerConfigValidate, NegativeBlockSize) {
  expect_invalid([](LayerConfig& c) { c.block_size = -16; }, {"block_size=-16", ">= 0"});
}

TEST(LayerConfigValidate, NegativeSlidingWindow) {
  expect_invalid([](LayerConfig& c) { c.sliding_window = -1; }, {"sliding_window=-1", ">= 0 (0 = none)"});
}

TEST(LayerConfigValidate, NegativeSoftCap) {
  expect_invalid([](LayerConfig& c) { c.logits_soft_cap = -30.0f; }, {"logits_soft_cap=-30", "a finite value >= 0"});
}

TEST(LayerConfigValidate, NaNSoftCap) {
  expect_invalid([](LayerConfig& c) { c.logits_soft_cap = std::nanf(""); }, {"logits_soft_cap=nan"});
}

TEST(LayerConfigValidate, InfiniteSoftCap) {
  expect_invalid([](LayerConfig& c) { c.logits_soft_cap = std::numeric_limits<float>::infinity(); }, {"logits_soft_cap=inf"});
}

TEST(LayerConfigValidate, StorageDTypeAsModelDType) {
  expect_invalid([](LayerConfig& c) { c.dtype = DType::fp8_e4m3; }, {"dtype=fp8_e4m3", "fp8 / int8 are storage types"});
}

TEST(LayerConfigValidate, IndexDTypeAsModelDType) {
  expect_invalid([](LayerConfig& c) { c.dtype = DType::int32; }, {"dtype=int32"});
}

TEST(LayerConfigValidate, MlaWithoutLoraRank) {
  expect_invalid([](LayerConfig& c) { c.use_mla = true; }, {"kv_lora_rank=0", "> 0 for an MLA layer"});
}

TEST(LayerConfigValidate, MlaHeadSizeNotLoraPlusRope) {
  expect_invalid([](LayerConfig& c) { c.use_mla = true; c.kv_lora_rank = 512; c.qk_rope_head_dim = 64; c.head_size = 512; },
                 {"head_size=512", "kv_lora_rank + qk_rope_head_dim = 576"});
}

TEST(LayerConfigValidate, SparseWithoutTopK) {
  expect_invalid([](LayerConfig& c) { c.use_sparse = true; }, {"index_topk=0", "> 0 for a sparse layer"});
}

TEST(LayerConfigValidate, BlockSparseWithoutBlockSize) {
  expect_invalid([](LayerConfig& c) { c.use_block_sparse = true; c.bs_local_blocks = 1; c.bs_vert_stride = 1; },
                 {"bs_block_size=0", "> 0 for a block-sparse layer"});
}

TEST(LayerConfigValidate, BlockSparseWithoutLocalBlocks) {
  expect_invalid([](LayerConfig& c) { c.use_block_sparse = true; c.bs_block_size = 64; c.bs_vert_stride = 1; },
                 {"bs_local_blocks=0"});
}

TEST(LayerConfigValidate, BlockSparseWithoutVertStride) {
  expect_invalid([](LayerConfig& c) { c.use_block_sparse = true; c.bs_block_size = 64; c.bs_local_blocks = 1; },
                 {"bs_vert_stride=0"});
}

TEST(LayerConfigValidate, AttentionFreeLayerCarriesNoShape) {
  LayerConfig c;
  c.is_attention_free = true;
  c.num_heads = 0;
  c.head_size = 0;
  EXPECT_NO_THROW(c.validate());
}

}  // namespace
