// The generic checker (check_capabilities): every reason field it can emit, with the layer's
// value and the backend's expectation, and the fixed order of reasons. SizeRule semantics.
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

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

// One capability taken away (or one required), one layer field set: exactly this reason, and
// none on the platforms listed in passes_on.
struct OneReasonCase {
  const char* name;
  void (*restrict_caps)(Capabilities&);
  void (*set_layer)(LayerConfig&);
  Reason expected;
  const char* platform = "cpu:avx2";
  std::vector<const char*> passes_on = {};
};

void PrintTo(const OneReasonCase& k, std::ostream* os) { *os << k.name; }

void nothing(LayerConfig&) {}

const OneReasonCase kOneReason[] = {
    {"Platform", [](Capabilities& c) { c.platforms = {PlatformKind::cuda}; }, nothing, {"platform", "cpu", "cuda"}},
    {"HeadSize", [](Capabilities& c) { c.head_sizes = SizeRule::one_of({64, 128, 256}); },
     [](LayerConfig& l) { l.head_size = 72; }, {"head_size", "72", "one of 64, 128, 256"}},
    {"HeadSizeV", [](Capabilities& c) { c.distinct_head_size_v = false; }, [](LayerConfig& l) { l.head_size_v = 64; },
     {"head_size_v", "64", "equal to head_size=128"}},
    {"DType", [](Capabilities& c) { c.dtypes = {DType::float16, DType::bfloat16}; },
     [](LayerConfig& l) { l.dtype = DType::float32; }, {"dtype", "float32", "one of float16, bfloat16"}},
    {"KvCacheDType", [](Capabilities& c) { c.kv_cache_dtypes = {KVCacheDType::auto_, KVCacheDType::fp8}; },
     [](LayerConfig& l) { l.kv_cache_dtype = KVCacheDType::nvfp4; }, {"kv_cache_dtype", "nvfp4", "one of auto, fp8"}},
    {"BlockSize", [](Capabilities& c) { c.block_sizes = SizeRule::multiple_of({16}); },
     [](LayerConfig& l) { l.block_size = 8; }, {"block_size", "8", "a multiple of 16"}},
    {"MmPrefix", [](Capabilities& c) { c.mm_prefix = false; }, [](LayerConfig& l) { l.use_mm_prefix = true; },
     {"use_mm_prefix", "true", "false (no partial multimodal full attention)"}},
    {"MlaLayerOnDenseBackend", [](Capabilities&) {}, [](LayerConfig& l) { l.use_mla = true; },
     {"use_mla", "true", "false (no MLA)"}},
    {"DenseLayerOnMlaBackend", [](Capabilities& c) { c.mla = true; }, nothing, {"use_mla", "false", "true (MLA layers only)"}},
    {"Sinks", [](Capabilities& c) { c.sinks = false; }, [](LayerConfig& l) { l.has_sink = true; },
     {"has_sink", "true", "false (no attention sinks)"}},
    {"SparseLayerOnDenseBackend", [](Capabilities&) {}, [](LayerConfig& l) { l.use_sparse = true; },
     {"use_sparse", "true", "false (dense attention only)"}},
    {"DenseLayerOnSparseBackend", [](Capabilities& c) { c.sparse = true; }, nothing,
     {"use_sparse", "false", "true (top-k sparse layers only)"}},
    {"BlockSparseLayerOnDenseBackend", [](Capabilities&) {}, [](LayerConfig& l) { l.use_block_sparse = true; },
     {"use_block_sparse", "true", "false (no block-sparse pattern)"}},
    {"DenseLayerOnBlockSparseBackend", [](Capabilities& c) { c.block_sparse = true; }, nothing,
     {"use_block_sparse", "false", "true (block-sparse layers only)"}},
    {"AttentionFreeLayerOnAttentionBackend", [](Capabilities&) {}, [](LayerConfig& l) { l.is_attention_free = true; },
     {"is_attention_free", "true", "false (needs an attention layer)"}},
    {"AttentionLayerOnAttentionFreeBackend", [](Capabilities& c) { c.attention_free = true; }, nothing,
     {"is_attention_free", "false", "true (serves attention-free layers only)"}},
    {"PerHeadQuantScales", [](Capabilities& c) { c.per_head_quant_scales = false; },
     [](LayerConfig& l) { l.use_per_head_quant_scales = true; },
     {"use_per_head_quant_scales", "true", "false (per-tensor scales only)"}},
    {"ComputeCapabilityTooLow", [](Capabilities& c) { c.min_cc = ComputeCapability{8, 0}; }, nothing,
     {"compute_capability", "7.5", ">= 8.0"}, "cuda:7.5", {"cuda:8.0"}},
    {"ComputeCapabilityTooHigh", [](Capabilities& c) { c.max_cc = ComputeCapability{9, 0}; }, nothing,
     {"compute_capability", "10.0", "<= 9.0"}, "cuda:10.0"},
    // compute capability is a cuda-only check: cpu passes.
    {"ComputeCapabilityOutsideARange",
     [](Capabilities& c) {
       c.min_cc = ComputeCapability{8, 0};
       c.max_cc = ComputeCapability{9, 0};
     },
     nothing, {"compute_capability", "12.0", "8.0..9.0"}, "cuda:12.0", {"cuda:8.6", "cpu:avx2"}},
    // cpu features are a cpu-only check: cuda passes.
    {"CpuFeatures",
     [](Capabilities& c) { c.required_cpu_features = {CpuFeature::avx2, CpuFeature::avx512f, CpuFeature::avx512_bf16}; },
     nothing, {"cpu_features", "missing avx512f, avx512_bf16", "CPU with avx2, avx512f, avx512_bf16"}, "cpu:avx2",
     {"cpu:avx512_bf16", "cuda:9.0"}},
    {"AttnType", [](Capabilities& c) { c.attn_types = {AttnType::decoder}; },
     [](LayerConfig& l) { l.attn_type = AttnType::encoder_decoder; }, {"attn_type", "encoder_decoder", "one of decoder"}},
    {"SlidingWindow", [](Capabilities& c) { c.sliding_window = false; }, [](LayerConfig& l) { l.sliding_window = 4096; },
     {"sliding_window", "4096", "0 (no sliding window)"}},
    {"LogitsSoftCap", [](Capabilities& c) { c.soft_cap = false; }, [](LayerConfig& l) { l.logits_soft_cap = 50.0f; },
     {"logits_soft_cap", "50", "0 (no soft-cap)"}},
    {"Alibi", [](Capabilities& c) { c.alibi = false; }, [](LayerConfig& l) { l.use_alibi = true; },
     {"use_alibi", "true", "false (no ALiBi)"}},
    {"NonCausal", [](Capabilities& c) { c.non_causal = false; }, [](LayerConfig& l) { l.use_non_causal = true; },
     {"use_non_causal", "true", "false (causal only)"}},
    {"BatchInvariant", [](Capabilities& c) { c.batch_invariance = false; },
     [](LayerConfig& l) { l.use_batch_invariant = true; }, {"use_batch_invariant", "true", "false (not batch invariant)"}},
    {"KvConnector", [](Capabilities& c) { c.kv_connector = false; }, [](LayerConfig& l) { l.use_kv_connector = true; },
     {"use_kv_connector", "true", "false (no KV connector)"}},
};

class OneReason : public ::testing::TestWithParam<OneReasonCase> {};

TEST_P(OneReason, NamesTheFieldTheValueAndTheExpectation) {
  const OneReasonCase& k = GetParam();
  Capabilities c = permissive();
  k.restrict_caps(c);
  LayerConfig l;
  k.set_layer(l);
  EXPECT_EQ(only_reason(c, l, parse_platform(k.platform)), k.expected);
  for (const char* p : k.passes_on) EXPECT_TRUE(check_capabilities(c, l, parse_platform(p)).empty()) << p;
}

INSTANTIATE_TEST_SUITE_P(CheckerReasons, OneReason, ::testing::ValuesIn(kOneReason),
                         [](const auto& info) { return std::string(info.param.name); });

// What the table's rows allow once the offending value changes.

TEST(CheckerReasons, HeadSizeVExplicitlyEqualIsFine) {
  Capabilities c = permissive();
  c.distinct_head_size_v = false;
  LayerConfig l;
  l.head_size_v = 128;
  EXPECT_TRUE(check_capabilities(c, l, cpu()).empty());
}

TEST(CheckerReasons, BlockSizeOnlyWhenTheUserSetsOne) {
  Capabilities c = permissive();
  c.block_sizes = SizeRule::multiple_of({16});
  EXPECT_TRUE(check_capabilities(c, LayerConfig{}, cpu()).empty()) << "block_size 0 = unset never filters";
}

TEST(CheckerReasons, AttentionFreeBackendServesAttentionFreeLayers) {
  Capabilities c = permissive();
  c.attention_free = true;
  LayerConfig l;
  l.is_attention_free = true;
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

TEST(CheckerReasons, LogitsSoftCapValueKeepsItsFraction) {
  Capabilities c = permissive();
  c.soft_cap = false;
  LayerConfig l;
  l.logits_soft_cap = 30.5f;
  EXPECT_EQ(only_reason(c, l).value, "30.5");
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
