// check_forward_args and LayerParams::validate (backend.hpp), exercised through the reference
// backend: every bad q / out / cache / metadata / parameter is an attn::Error naming the
// argument, raised before any output is written.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "attn/attn.hpp"
#include "support/expect_error.hpp"
#include "support/test_support.hpp"

namespace {

using namespace attn;
using attn::test::throws_error;

struct ForwardArgs : ::testing::Test {
  test::Case c;
  void SetUp() override {
    test::CaseSpec spec;
    spec.config.dtype = DType::float32;
    spec.config.num_heads = 4;
    spec.config.num_kv_heads = 2;
    spec.config.head_size = 16;
    spec.seqs = {{3, 2}, {0, 4}};
    spec.block_size = 4;
    spec.seed = 7;
    c = test::make_case(spec, "reference");
  }
  void forward() { c.impl->forward(c.q.view(), *c.cache, c.md, c.out.view()); }
  // Asserts `forward()` throws naming `fragments` and leaves the output untouched.
  void expect_rejected(std::initializer_list<std::string_view> fragments) {
    const int64_t n = c.out.view().numel();
    for (int64_t i = 0; i < n; ++i) store_from_float(c.out.data(), c.out.dtype(), i, 12345.0f);
    EXPECT_TRUE(throws_error([&] { forward(); }, fragments));
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(load_as_float(c.out.data(), c.out.dtype(), i), 12345.0f) << "output written at " << i;
  }
};

TEST_F(ForwardArgs, ValidCaseRuns) { EXPECT_NO_THROW(forward()); }

TEST_F(ForwardArgs, QueryRankWrong) {
  TensorView q = c.q.view();
  q = TensorView::contiguous(q.data, q.dtype, {c.md.num_tokens, 4 * 16});
  EXPECT_TRUE(throws_error([&] { c.impl->forward(q, *c.cache, c.md, c.out.view()); }, {"q.ndim=2", "3 dimensions"}));
}

TEST_F(ForwardArgs, QueryTokensDisagreeWithMetadata) {
  c.md.num_tokens = 5;
  c.md.query_start_loc.back() = 5;
  c.md.seq_lens.back() -= 1;     // the last sequence has one new token less: same context
  c.md.slot_mapping.resize(5);  // consistent metadata (validated once per step); q has 6 tokens
  expect_rejected({"q.shape=[6, 4, 16]", "dimension 0 to be 5"});
}

TEST_F(ForwardArgs, QueryHeadSizeWrong) {
  c.q = Buffer(DType::float32, {6, 4, 8});
  expect_rejected({"q.shape=[6, 4, 8]", "dimension 2 to be 16"});
}

TEST_F(ForwardArgs, QueryDTypeDiffersFromLayer) {
  c.q = Buffer(DType::bfloat16, {6, 4, 16});
  expect_rejected({"q.dtype=bfloat16", "the layer dtype float32"});
}

TEST_F(ForwardArgs, OutputDTypeDiffersFromQuery) {
  c.out = Buffer(DType::float16, {6, 4, 16});
  EXPECT_TRUE(throws_error([&] { forward(); }, {"out.dtype=float16", "the layer dtype float32"}));
}

TEST_F(ForwardArgs, OutputShapeWrong) {
  c.out = Buffer(DType::float32, {6, 2, 16});
  EXPECT_TRUE(throws_error([&] { forward(); }, {"out.shape=[6, 2, 16]", "dimension 1 to be 4"}));
}

TEST_F(ForwardArgs, QueryLastDimensionNotContiguous) {
  TensorView q = c.q.view();
  q.strides[2] = 2;
  q.shape[2] = 16;
  EXPECT_TRUE(throws_error([&] { c.impl->forward(q, *c.cache, c.md, c.out.view()); }, {"q.strides=2"}));
}

TEST_F(ForwardArgs, OutputAliasesQuery) {
  // Same shape, same buffer: the kernel would read q rows it already overwrote.
  TensorView q = c.q.view();
  EXPECT_TRUE(throws_error([&] { c.impl->forward(q, *c.cache, c.md, q); }, {"out.data", "overlaps q"}));
}

TEST_F(ForwardArgs, OutputOnCuda) {
  TensorView out = c.out.view();
  out.device = DeviceKind::cuda;
  EXPECT_TRUE(throws_error([&] { c.impl->forward(c.q.view(), *c.cache, c.md, out); }, {"out.device"}));
}

TEST_F(ForwardArgs, CacheKvHeadsDisagreeWithLayer) {
  KVCacheSpec s = c.cache->spec();
  s.num_kv_heads = 4;
  c.cache = std::make_unique<KVCache>(s);
  expect_rejected({"cache.num_kv_heads=4", "the layer's num_kv_heads 2"});
}

TEST_F(ForwardArgs, CacheHeadSizeDisagreesWithLayer) {
  KVCacheSpec s = c.cache->spec();
  s.head_size = 32;
  s.head_size_v = 32;
  c.cache = std::make_unique<KVCache>(s);
  expect_rejected({"cache.head_size_v=32"});
}

TEST_F(ForwardArgs, CacheDTypeDisagreesWithKvCacheDType) {
  KVCacheSpec s = c.cache->spec();
  s.dtype = DType::fp8_e4m3;  // layer says kv_cache_dtype=auto → float32 storage
  c.cache = std::make_unique<KVCache>(s);
  expect_rejected({"cache.dtype=fp8_e4m3", "float32 for kv_cache_dtype auto"});
}

TEST_F(ForwardArgs, MetadataBlockSizeDisagreesWithCache) {
  c.md.block_size = 8;
  expect_rejected({"metadata.block_size=8", "the cache's block_size 4"});
}

TEST_F(ForwardArgs, MetadataBlockIdBeyondTheCache) {
  c.md.block_table[1] = c.cache->spec().num_blocks;
  expect_rejected({"metadata.block_table[0][1]", "a block id in [0, "});
}

TEST_F(ForwardArgs, MetadataSeqLenBeyondItsTable) {
  c.md.seq_lens[1] = 64;
  c.md.max_seq_len = 64;
  expect_rejected({"metadata.seq_lens[1]=64", "max_blocks_per_seq * block_size"});
}

TEST_F(ForwardArgs, MetadataQueryStartLocMalformed) {
  c.md.query_start_loc[1] = 7;
  expect_rejected({"metadata.query_start_loc"});
}

// --- LayerParams::validate (checked when a backend builds its implementation) ---

struct Params : ::testing::Test {
  LayerParams p;
  void SetUp() override {
    p.config.dtype = DType::float32;
    p.config.num_heads = 4;
    p.config.num_kv_heads = 2;
    p.config.head_size = 16;
  }
  void create() { Registry::instance().create("reference", p); }
};

TEST_F(Params, NaNScale) {
  p.scale = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error([&] { create(); }, {"scale=nan", "a finite value >= 0"}));
}

TEST_F(Params, InfiniteScale) {
  p.scale = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(throws_error([&] { create(); }, {"scale=inf"}));
}

TEST_F(Params, NegativeScale) {
  p.scale = -0.125f;
  EXPECT_TRUE(throws_error([&] { create(); }, {"scale=-0.125"}));
}

TEST_F(Params, SinksMissing) {
  p.config.has_sink = true;
  EXPECT_TRUE(throws_error([&] { create(); }, {"sinks.size()=0", "num_heads = 4 (has_sink=true)"}));
}

TEST_F(Params, SinksWrongCount) {
  p.config.has_sink = true;
  p.sinks = {0.0f, 0.0f};
  EXPECT_TRUE(throws_error([&] { create(); }, {"sinks.size()=2", "num_heads = 4"}));
}

TEST_F(Params, SinkNotFinite) {
  p.config.has_sink = true;
  p.sinks = {0.0f, 0.0f, std::numeric_limits<float>::infinity(), 0.0f};
  EXPECT_TRUE(throws_error([&] { create(); }, {"sinks[2]=inf", "a finite logit"}));
}

TEST_F(Params, SinksGivenForALayerWithout) {
  p.sinks = {0.0f, 0.0f, 0.0f, 0.0f};
  EXPECT_TRUE(throws_error([&] { create(); }, {"sinks.size()=4", "0 (has_sink=false)"}));
}

TEST_F(Params, AlibiSlopesWrongCount) {
  p.config.use_alibi = true;
  p.alibi_slopes = {0.5f};
  EXPECT_TRUE(throws_error([&] { create(); }, {"alibi_slopes.size()=1", "num_heads = 4"}));
}

TEST_F(Params, AlibiSlopeNotFinite) {
  // A NaN slope made every score of its head NaN on one backend and was skipped on another.
  p.config.use_alibi = true;
  p.alibi_slopes = {0.5f, std::nanf(""), 0.125f, 0.0625f};
  EXPECT_TRUE(throws_error([&] { create(); }, {"alibi_slopes[1]=nan", "a finite slope"}));
}

TEST_F(Params, AlibiSlopesWithoutAlibi) {
  p.alibi_slopes = {0.5f, 0.25f, 0.125f, 0.0625f};
  EXPECT_TRUE(throws_error([&] { create(); }, {"alibi_slopes.size()=4", "0 (use_alibi=false)"}));
}

TEST_F(Params, NegativeThreadCount) {
  p.num_threads = -1;
  EXPECT_TRUE(throws_error([&] { create(); }, {"num_threads=-1", ">= 0"}));
}

TEST_F(Params, InvalidLayerConfig) {
  p.config.num_kv_heads = 3;
  EXPECT_TRUE(throws_error([&] { create(); }, {"num_kv_heads=3", "a divisor of num_heads=4"}));
}

TEST(AlibiSlopes, StandardSlopesForPowersOfTwoAndOthers) {
  const auto s8 = alibi_slopes(8);
  ASSERT_EQ(s8.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(s8[std::size_t(i)], std::pow(2.0f, -float(i + 1)));
  const auto s12 = alibi_slopes(12);  // 8 standard slopes, then 4 interleaved from 16 heads
  ASSERT_EQ(s12.size(), 12u);
  EXPECT_FLOAT_EQ(s12[8], std::pow(2.0f, -0.5f));
  EXPECT_FLOAT_EQ(s12[9], std::pow(2.0f, -1.5f));
}

TEST(NoAttention, ForwardAndWriteAreClearErrors) {
  LayerParams p;
  p.config.is_attention_free = true;
  auto impl = Registry::instance().create("no_attention", p);
  KVCacheSpec s;
  s.num_blocks = 1;
  KVCache cache(s);
  BatchMetadata md;
  EXPECT_TRUE(throws_error([&] { impl->forward({}, cache, md, {}); }, {"no_attention.plan", "is_attention_free=true"}));
  EXPECT_TRUE(throws_error([&] { impl->write_kv({}, {}, cache, md); }, {"no_attention.write_kv"}));
}

}  // namespace
