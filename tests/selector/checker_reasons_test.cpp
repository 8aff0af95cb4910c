// The generic checker (check_capabilities): every reason field it can emit, with the layer's
// value and the backend's expectation, and the fixed order of reasons. SizeRule semantics.
#include <gtest/gtest.h>

#include <algorithm>

#include "attn/capabilities.hpp"
#include "selector/permissive_caps.hpp"

namespace {

using namespace attn;

// Everything allowed; each test takes one thing away.
Capabilities permissive() { return test::permissive_caps(); }

const Platform& cpu() {
  static const Platform p = parse_platform("cpu:avx2");
  return p;
}

// The single reason the checker gives, or a failure listing what it gave instead.
Reason only_reason(const Capabilities& caps, const LayerConfig& cfg, const Platform& p = cpu()) {
  const auto rs = check_capabilities(caps, cfg, p);
  std::string all;
  for (auto& r : rs) all += r.to_string() + "; ";
  EXPECT_EQ(rs.size(), 1u) << all;
  return rs.empty() ? Reason{} : rs.front();
}

TEST(CheckerReasons, PermissiveBackendServesTheDefaultLayer) {
  EXPECT_TRUE(check_capabilities(permissive(), LayerConfig{}, cpu()).empty());
}

TEST(CheckerReasons, Platform) {
  Capabilities c = permissive();
  c.platforms = {PlatformKind::cuda};
  EXPECT_EQ(only_reason(c, {}), (Reason{"platform", "cpu", "cuda"}));
}

TEST(CheckerReasons, HeadSize) {
  Capabilities c = permissive();
  c.head_sizes = SizeRule::one_of({64, 128, 256});
  LayerConfig l;
  l.head_size = 72;
  EXPECT_EQ(only_reason(c, l), (Reason{"head_size", "72", "one of 64, 128, 256"}));
}

TEST(CheckerReasons, HeadSizeV) {
  Capabilities c = permissive();
  c.distinct_head_size_v = false;
  LayerConfig l;
  l.head_size_v = 64;
  EXPECT_EQ(only_reason(c, l), (Reason{"head_size_v", "64", "equal to head_size=128"}));
  l.head_size_v = 128;  // explicitly equal is fine
  EXPECT_TRUE(check_capabilities(c, l, cpu()).empty());
}

TEST(CheckerReasons, DType) {
  Capabilities c = permissive();
  c.dtypes = {DType::float16, DType::bfloat16};
  LayerConfig l;
  l.dtype = DType::float32;
  EXPECT_EQ(only_reason(c, l), (Reason{"dtype", "float32", "one of float16, bfloat16"}));
}

TEST(CheckerReasons, KvCacheDType) {
  Capabilities c = permissive();
  c.kv_cache_dtypes = {KVCacheDType::auto_, KVCacheDType::fp8};
  LayerConfig l;
  l.kv_cache_dtype = KVCacheDType::nvfp4;
  EXPECT_EQ(only_reason(c, l), (Reason{"kv_cache_dtype", "nvfp4", "one of auto, fp8"}));
}

TEST(CheckerReasons, BlockSizeOnlyWhenTheUserSetsOne) {
  Capabilities c = permissive();
  c.block_sizes = SizeRule::multiple_of({16});
  LayerConfig l;
  EXPECT_TRUE(check_capabilities(c, l, cpu()).empty()) << "block_size 0 = unset never filters";
  l.block_size = 8;
  EXPECT_EQ(only_reason(c, l), (Reason{"block_size", "8", "a multiple of 16"}));
}

TEST(CheckerReasons, MmPrefix) {
  Capabilities c = permissive();
  c.mm_prefix = false;
  LayerConfig l;
  l.use_mm_prefix = true;
  EXPECT_EQ(only_reason(c, l).field, "use_mm_prefix");
}

TEST(CheckerReasons, MlaLayerOnDenseBackend) {
  Capabilities c = permissive();
  LayerConfig l;
  l.use_mla = true;
  EXPECT_EQ(only_reason(c, l), (Reason{"use_mla", "true", "false (no MLA)"}));
}

TEST(CheckerReasons, DenseLayerOnMlaBackend) {
  Capabilities c = permissive();
  c.mla = true;
  EXPECT_EQ(only_reason(c, {}), (Reason{"use_mla", "false", "true (MLA layers only)"}));
}

TEST(CheckerReasons, Sinks) {
  Capabilities c = permissive();
  c.sinks = false;
  LayerConfig l;
  l.has_sink = true;
  EXPECT_EQ(only_reason(c, l), (Reason{"has_sink", "true", "false (no attention sinks)"}));
}

TEST(CheckerReasons, SparseBothWays) {
  Capabilities c = permissive();
  LayerConfig l;
  l.use_sparse = true;
  EXPECT_EQ(only_reason(c, l), (Reason{"use_sparse", "true", "false (dense attention only)"}));
  c.sparse = true;
  EXPECT_EQ(only_reason(c, {}), (Reason{"use_sparse", "false", "true (top-k sparse layers only)"}));
}

TEST(CheckerReasons, BlockSparseBothWays) {
  Capabilities c = permissive();
  LayerConfig l;
  l.use_block_sparse = true;
  EXPECT_EQ(only_reason(c, l), (Reason{"use_block_sparse", "true", "false (no block-sparse pattern)"}));
  c.block_sparse = true;
  EXPECT_EQ(only_reason(c, {}), (Reason{"use_block_sparse", "false", "true (block-sparse layers only)"}));
}

TEST(CheckerReasons, AttentionFreeBothWays) {
  Capabilities c = permissive();
  LayerConfig l;
  l.is_attention_free = true;
  EXPECT_EQ(only_reason(c, l), (Reason{"is_attention_free", "true", "false (needs an attention layer)"}));
  c.attention_free = true;
  EXPECT_EQ(only_reason(c, {}), (Reason{"is_attention_free", "false", "true (serves attention-free layers only)"}));
  EXPECT_TRUE(check_capabilities(c, l, cpu()).empty());
}

TEST(CheckerReasons, AttentionFreeLayerSkipsShapeChecks) {
  // An attention-free layer carries no attention shape: only platform and the flag are checked.
  Capabilities c = permissive();
  c.attention_free = true;
  c.platforms = {PlatformKind::cuda};
  c.head_sizes = SizeRule::one_of({64});
  LayerConfig l;
  l.is_attention_free = true;
  l.head_size = 3;
  EXPECT_EQ(only_reason(c, l).field, "platform");
}

TEST(CheckerReasons, PerHeadQuantScales) {
  Capabilities c = permissive();
  c.per_head_quant_scales = false;
  LayerConfig l;
  l.use_per_head_quant_scales = true;
  EXPECT_EQ(only_reason(c, l), (Reason{"use_per_head_quant_scales", "true", "false (per-tensor scales only)"}));
}

TEST(CheckerReasons, ComputeCapabilityTooLow) {
  Capabilities c = permissive();
  c.min_cc = ComputeCapability{8, 0};
  EXPECT_EQ(only_reason(c, {}, parse_platform("cuda:7.5")), (Reason{"compute_capability", "7.5", ">= 8.0"}));
  EXPECT_TRUE(check_capabilities(c, {}, parse_platform("cuda:8.0")).empty());
}

TEST(CheckerReasons, ComputeCapabilityTooHigh) {
  Capabilities c = permissive();
  c.max_cc = ComputeCapability{9, 0};
  EXPECT_EQ(only_reason(c, {}, parse_platform("cuda:10.0")), (Reason{"compute_capability", "10.0", "<= 9.0"}));
}

TEST(CheckerReasons, ComputeCapabilityOutsideARange) {
  Capabilities c = permissive();
  c.min_cc = ComputeCapability{8, 0};
  c.max_cc = ComputeCapability{9, 0};
  EXPECT_EQ(only_reason(c, {}, parse_platform("cuda:12.0")), (Reason{"compute_capability", "12.0", "8.0..9.0"}));
  EXPECT_TRUE(check_capabilities(c, {}, parse_platform("cuda:8.6")).empty());
  EXPECT_TRUE(check_capabilities(c, {}, cpu()).empty()) << "compute capability is a cuda-only check";
}

TEST(CheckerReasons, CpuFeatures) {
  Capabilities c = permissive();
  c.required_cpu_features = {CpuFeature::avx2, CpuFeature::avx512f, CpuFeature::avx512_bf16};
  EXPECT_EQ(only_reason(c, {}), (Reason{"cpu_features", "missing avx512f, avx512_bf16", "CPU with avx2, avx512f, avx512_bf16"}));
  EXPECT_TRUE(check_capabilities(c, {}, parse_platform("cpu:avx512_bf16")).empty());
  EXPECT_TRUE(check_capabilities(c, {}, parse_platform("cuda:9.0")).empty()) << "cpu features are a cpu-only check";
}

TEST(CheckerReasons, AttnType) {
  Capabilities c = permissive();
  c.attn_types = {AttnType::decoder};
  LayerConfig l;
  l.attn_type = AttnType::encoder_decoder;
  EXPECT_EQ(only_reason(c, l), (Reason{"attn_type", "encoder_decoder", "one of decoder"}));
}

TEST(CheckerReasons, SlidingWindow) {
  Capabilities c = permissive();
  c.sliding_window = false;
  LayerConfig l;
  l.sliding_window = 4096;
  EXPECT_EQ(only_reason(c, l), (Reason{"sliding_window", "4096", "0 (no sliding window)"}));
}

TEST(CheckerReasons, LogitsSoftCap) {
  Capabilities c = permissive();
  c.soft_cap = false;
  LayerConfig l;
  l.logits_soft_cap = 50.0f;
  EXPECT_EQ(only_reason(c, l), (Reason{"logits_soft_cap", "50", "0 (no soft-cap)"}));
  l.logits_soft_cap = 30.5f;
  EXPECT_EQ(only_reason(c, l).value, "30.5");
}

TEST(CheckerReasons, Alibi) {
  Capabilities c = permissive();
  c.alibi = false;
  LayerConfig l;
  l.use_alibi = true;
  EXPECT_EQ(only_reason(c, l), (Reason{"use_alibi", "true", "false (no ALiBi)"}));
}

TEST(CheckerReasons, NonCausal) {
  Capabilities c = permissive();
  c.non_causal = false;
  LayerConfig l;
  l.use_non_causal = true;
  EXPECT_EQ(only_reason(c, l), (Reason{"use_non_causal", "true", "false (causal only)"}));
}

TEST(CheckerReasons, BatchInvariant) {
  Capabilities c = permissive();
  c.batch_invariance = false;
  LayerConfig l;
  l.use_batch_invariant = true;
  EXPECT_EQ(only_reason(c, l), (Reason{"use_batch_invariant", "true", "false (not batch invariant)"}));
}

TEST(CheckerReasons, KvConnector) {
  Capabilities c = permissive();
  c.kv_connector = false;
  LayerConfig l;
  l.use_kv_connector = true;
  EXPECT_EQ(only_reason(c, l), (Reason{"use_kv_connector", "true", "false (no KV connector)"}));
}

TEST(CheckerReasons, FixedOrderWhenEverythingFails) {
  Capabilities c;  // defaults: cpu, f16/bf16, auto/f16/bf16 kv, decoder only, no features
  c.platforms = {PlatformKind::cpu};
  c.head_sizes = SizeRule::one_of({64});
  c.block_sizes = SizeRule::one_of({16});
  c.kv_connector = false;
  c.required_cpu_features = {CpuFeature::amx_tile};
  LayerConfig l;
  l.head_size = 80;
  l.head_size_v = 96;
  l.dtype = DType::float32;
  l.kv_cache_dtype = KVCacheDType::fp8;
  l.block_size = 8;
  l.use_mm_prefix = l.use_mla = l.has_sink = l.use_sparse = l.use_block_sparse = true;
  l.use_per_head_quant_scales = true;
  l.attn_type = AttnType::encoder;
  l.sliding_window = 128;
  l.logits_soft_cap = 30.0f;
  l.use_alibi = l.use_non_causal = l.use_batch_invariant = l.use_kv_connector = true;
  std::vector<std::string> fields;
  for (auto& r : check_capabilities(c, l, cpu())) fields.push_back(r.field);
  // The documented order (capabilities.hpp); is_attention_free and platform are exclusive of
  // the rest and covered above.
  EXPECT_EQ(fields, (std::vector<std::string>{"head_size", "head_size_v", "dtype", "kv_cache_dtype", "block_size", "use_mm_prefix",
                                              "use_mla", "has_sink", "use_sparse", "use_block_sparse",
                                              "use_per_head_quant_scales", "cpu_features", "attn_type", "sliding_window",
                                              "logits_soft_cap", "use_alibi", "use_non_causal", "use_batch_invariant",
                                              "use_kv_connector"}));
}

TEST(CheckerReasons, PlatformComesFirst) {
  Capabilities c = permissive();
  c.platforms = {PlatformKind::cuda};
  c.dtypes = {DType::float16};
  LayerConfig l;
  l.dtype = DType::float32;
  const auto rs = check_capabilities(c, l, cpu());
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[0].field, "platform");
  EXPECT_EQ(rs[1].field, "dtype");
}

TEST(CheckerReasons, ReasonText) {
  EXPECT_EQ((Reason{"head_size", "72", "one of 64, 128"}).to_string(), "head_size=72, expected one of 64, 128");
}

// --- SizeRule ---

TEST(SizeRule, Any) {
  const SizeRule r = SizeRule::any();
  EXPECT_TRUE(r.allows(1));
  EXPECT_TRUE(r.allows(1000));
  EXPECT_FALSE(r.allows(0));
  EXPECT_FALSE(r.allows(-16));
  EXPECT_EQ(r.describe(), "any positive size");
}

TEST(SizeRule, OneOf) {
  const SizeRule r = SizeRule::one_of({64, 128});
  EXPECT_TRUE(r.allows(64));
  EXPECT_FALSE(r.allows(96));
  EXPECT_EQ(r.describe(), "one of 64, 128");
}

TEST(SizeRule, Range) {
  const SizeRule r = SizeRule::range(32, 256, 8);
  EXPECT_TRUE(r.allows(32));
  EXPECT_TRUE(r.allows(40));
  EXPECT_TRUE(r.allows(256));
  EXPECT_FALSE(r.allows(36));
  EXPECT_FALSE(r.allows(264));
  EXPECT_FALSE(r.allows(24));
  EXPECT_EQ(r.describe(), "32..256 in steps of 8");
  EXPECT_EQ(SizeRule::range(1, 4, 1).describe(), "1..4");
}

TEST(SizeRule, MultipleOf) {
  const SizeRule r = SizeRule::multiple_of({16, 24});
  EXPECT_TRUE(r.allows(32));
  EXPECT_TRUE(r.allows(48));
  EXPECT_TRUE(r.allows(72));
  EXPECT_FALSE(r.allows(8));
  EXPECT_FALSE(r.allows(0));
  EXPECT_EQ(r.describe(), "a multiple of 16, 24");
}

TEST(SizeRule, PlusAddsExtraValues) {
  const SizeRule r = SizeRule::range(32, 128, 32).plus({80});
  EXPECT_TRUE(r.allows(80));
  EXPECT_TRUE(r.allows(96));
  EXPECT_FALSE(r.allows(112));
  EXPECT_EQ(r.describe(), "32..128 in steps of 32, or 80");
}

}  // namespace
