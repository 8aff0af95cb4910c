// KVCache construction (kv_cache.hpp): the declared shape per layout, the pair layout's fallback,
// and every bad spec refused with an attn::Error naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "attn/backend.hpp"
#include "attn/kv_cache.hpp"
#include "attn/limits.hpp"
#include "attn/numeric.hpp"
#include "support/expect_error.hpp"
#include "support/small_kv_spec.hpp"

namespace {

using namespace attn;
using attn::test::throws_error;
using attn::test::small_kv_spec;

TEST(KVCacheSpecShape, DeclaredShapesPerLayout) {
  KVCacheSpec s = small_kv_spec();
  EXPECT_EQ(s.shape(), (std::vector<int64_t>{4, 2, 4, 2, 8}));
  s.layout = KVLayout::HND;
  EXPECT_EQ(s.shape(), (std::vector<int64_t>{4, 2, 2, 4, 8}));
  s.layout = KVLayout::MLA;
  s.num_kv_heads = 1;
  EXPECT_EQ(s.shape(), (std::vector<int64_t>{4, 4, 8}));
  EXPECT_NE(s.to_string().find("MLA [4, 4, 8] float32"), std::string::npos) << s.to_string();
}

TEST(KVCacheSpecShape, PairLayoutDeclaresHndExtent) {
  KVCacheSpec s = small_kv_spec(DType::bfloat16, KVLayout::HND_PAIRS);
  s.block_size = 16;
  EXPECT_EQ(s.shape(), (std::vector<int64_t>{4, 2, 2, 16, 8}));
  EXPECT_EQ(to_string(KVLayout::HND_PAIRS), "HND_PAIRS");
  EXPECT_NE(s.to_string().find("HND_PAIRS [4, 2, 2, 16, 8] bfloat16"), std::string::npos) << s.to_string();
}

TEST(KVCacheSpecShape, PairLayoutFallsBackToHndWhereItDoesNotFit) {
  // BackendDescriptor::cache_spec: a backend declaring HND_PAIRS for bf16 products (cpu_flash's
  // rule) gets it on even head sizes and blocks of 16s, HND rows otherwise.
  BackendDescriptor d;
  d.kv_layout = KVLayout::HND_PAIRS;
  d.kv_layout_rule = KVLayoutRule{.q_dtypes = {DType::bfloat16},
                                  .storage_dtypes = {DType::bfloat16, DType::fp8_e4m3, DType::fp8_e5m2},
                                  .otherwise = KVLayout::HND,
                                  .cpu_features = {}};
  LayerConfig c;
  c.num_heads = 8, c.num_kv_heads = 2, c.head_size = 128, c.dtype = DType::bfloat16;
  EXPECT_EQ(d.cache_spec(c, 4, 64).layout, KVLayout::HND_PAIRS);
  EXPECT_EQ(d.cache_spec(c, 4, 24).layout, KVLayout::HND);
  c.kv_cache_dtype = KVCacheDType::fp8_e5m2;
  EXPECT_EQ(d.cache_spec(c, 4, 16).layout, KVLayout::HND_PAIRS);
  c.kv_cache_dtype = KVCacheDType::float16;
  EXPECT_EQ(d.cache_spec(c, 4, 16).layout, KVLayout::HND);
  c.kv_cache_dtype = KVCacheDType::auto_, c.head_size = 63;
  EXPECT_EQ(d.cache_spec(c, 4, 16).layout, KVLayout::HND);
  c.head_size = 128, c.dtype = DType::float32;
  EXPECT_EQ(d.cache_spec(c, 4, 16).layout, KVLayout::HND);
  // cpu_features: kept only on a CPU that has them (a GPU platform is not asked).
  c.dtype = DType::bfloat16;
  d.kv_layout_rule->cpu_features = {CpuFeature::avx512_bf16};
  for (auto [spec, want] : {std::pair{"cpu:avx512_bf16", KVLayout::HND_PAIRS}, std::pair{"cpu:avx2", KVLayout::HND},
                            std::pair{"cuda:9.0", KVLayout::HND_PAIRS}}) {
    const Platform p = parse_platform(spec);
    EXPECT_EQ(d.cache_spec(c, 4, 16, &p).layout, want) << spec;
  }
}

TEST(KVCacheSpecShape, LayoutWithoutRuleIsKeptForEveryCache) {
  BackendDescriptor d;
  LayerConfig c;
  c.num_heads = 8, c.num_kv_heads = 2, c.head_size = 128, c.dtype = DType::float16;
  for (KVLayout l : {KVLayout::NHD, KVLayout::HND, KVLayout::HND_PAIRS}) {
    d.kv_layout = l;
    EXPECT_EQ(d.cache_spec(c, 4, 16).layout, l) << to_string(l);
    EXPECT_EQ(d.cache_spec(c, 4, 24).layout, l) << to_string(l);  // not checked: validate refuses it
  }
  // A rule with no dtype lists serves every dtype; the sizes still decide.
  d.kv_layout_rule = KVLayoutRule{.q_dtypes = {}, .storage_dtypes = {}, .otherwise = KVLayout::NHD, .cpu_features = {}};
  c.kv_cache_dtype = KVCacheDType::fp8_e4m3;
  EXPECT_EQ(d.cache_spec(c, 4, 16).layout, KVLayout::HND_PAIRS);
  EXPECT_EQ(d.cache_spec(c, 4, 24).layout, KVLayout::NHD);
  d.kv_layout = KVLayout::NHD, d.kv_layout_rule->otherwise = KVLayout::HND;  // NHD fits every size
  EXPECT_EQ(d.cache_spec(c, 4, 24).layout, KVLayout::NHD);
}

TEST(KVCacheSpecShape, LayoutFitsSizesAgreesWithValidate) {
  // The one predicate cache_spec asks, and the sizes KVCacheSpec::validate refuses.
  KVCacheSpec s = small_kv_spec(DType::bfloat16);
  for (KVLayout l : {KVLayout::NHD, KVLayout::HND, KVLayout::HND_PAIRS})
    for (int32_t head : {7, 8, 80, 63})
      for (int32_t v : {0, 5, 6})
        for (int32_t bs : {1, 8, 16, 24, 32, 64}) {
          s.layout = l, s.head_size = head, s.head_size_v = v, s.block_size = bs;
          const bool pair_sizes = head % 2 == 0 && s.v_width() % 2 == 0 && bs % 16 == 0;
          const bool fits = layout_fits_sizes(s);
          EXPECT_EQ(fits, l != KVLayout::HND_PAIRS || pair_sizes) << s.to_string();
          bool valid = true;
          try {
            s.validate();
          } catch (const Error&) {
            valid = false;
          }
          EXPECT_EQ(fits, valid) << s.to_string();
        }
}

TEST(KVCacheConstruction, PairLayoutNeedsBlocksOfSixteen) {
  KVCacheSpec s = small_kv_spec(DType::bfloat16, KVLayout::HND_PAIRS);
  s.block_size = 24;
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"block_size=24", "multiple of 16", "HND_PAIRS"}));
}

TEST(KVCacheConstruction, PairLayoutNeedsEvenHeadSizes) {
  KVCacheSpec s = small_kv_spec(DType::bfloat16, KVLayout::HND_PAIRS);
  s.block_size = 16;
  s.head_size = 7;
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"head_size=7", "even", "HND_PAIRS"}));
  s.head_size = 8, s.head_size_v = 5;
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"head_size_v=5", "even", "HND_PAIRS"}));
}

TEST(KVCacheConstruction, ZeroBlocks) {
  KVCacheSpec s = small_kv_spec();
  s.num_blocks = 0;
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"num_blocks=0", "> 0"}));
}

TEST(KVCacheConstruction, ZeroBlockSize) {
  KVCacheSpec s = small_kv_spec();
  s.block_size = 0;
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"block_size=0", "> 0"}));
}

TEST(KVCacheConstruction, ZeroKvHeads) {
  KVCacheSpec s = small_kv_spec();
  s.num_kv_heads = 0;
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"num_kv_heads=0", "> 0"}));
}

TEST(KVCacheConstruction, NegativeHeadSize) {
  KVCacheSpec s = small_kv_spec();
  s.head_size = -8;
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"head_size=-8", "> 0"}));
}

TEST(KVCacheConstruction, NegativeHeadSizeV) {
  KVCacheSpec s = small_kv_spec();
  s.head_size_v = -1;
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"head_size_v=-1", ">= 0"}));
}

TEST(KVCacheConstruction, IntegerStorageDType) {
  KVCacheSpec s = small_kv_spec(DType::int8);
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"cache dtype=int8", "fp8_e4m3"}));
}

TEST(KVCacheConstruction, PerTokenHeadSpecs) {
  KVCacheSpec s = small_kv_spec(DType::int8, KVLayout::HND_PAIRS);
  s.kv_cache_dtype = KVCacheDType::int8_per_token_head;
  s.block_size = 16;
  KVCache ok(s);  // int8 codes with their scales
  EXPECT_EQ(s.token_scale_bytes(), 2 * int64_t(s.num_blocks) * s.block_size * s.num_kv_heads * 4);
  EXPECT_NE(ok.k_token_scales(), nullptr);
  EXPECT_EQ(ok.view().v_token_scales, ok.v_token_scales());
  KVCacheSpec wrong = s;
  wrong.dtype = DType::fp8_e4m3;
  EXPECT_TRUE(throws_error([&] { KVCache c(wrong); }, {"cache dtype=fp8_e4m3", "int8 for kv_cache_dtype int8_per_token_head"}));
  wrong = s;
  wrong.kv_cache_dtype = KVCacheDType::fp8_per_token_head;
  EXPECT_TRUE(throws_error([&] { KVCache c(wrong); }, {"cache dtype=int8", "fp8_e4m3 for kv_cache_dtype fp8_per_token_head"}));
  wrong = s;
  wrong.per_head_scales = true;
  EXPECT_TRUE(throws_error([&] { KVCache c(wrong); }, {"per_head_scales=true", "each slot carries its own scales"}));
  EXPECT_TRUE(throws_error([&] { ok.set_scales({1.0f}, {1.0f}); }, {"kv_cache_dtype=int8_per_token_head", "compute each slot's scales"}));
  EXPECT_TRUE(throws_error([&] { ok.use_token_scales(nullptr, nullptr); }, {"token scales=null"}));
  KVCache plain(small_kv_spec());
  float k = 1, v = 1;
  EXPECT_TRUE(throws_error([&] { plain.use_token_scales(&k, &v); }, {"kv_cache_dtype=auto", "int8_per_token_head, fp8_per_token_head or int4_per_token_head"}));
  EXPECT_EQ(plain.k_token_scales(), nullptr);
}

TEST(KVCacheConstruction, PerTokenHeadFillCopyBlockAndCopy) {
  KVCacheSpec s = small_kv_spec(DType::fp8_e4m3, KVLayout::HND);
  s.kv_cache_dtype = KVCacheDType::fp8_per_token_head;
  KVCache c(s);
  c.fill(2.5f);  // every element reads 2.5: code 1, scale 2.5
  const PagedKV v = c.view();
  EXPECT_EQ(load_as_float(v.base, v.dtype, kv_element_offset(v, 1, 2, 1, 3, true)) * v.v_token_scales[token_scale_index(v, 1, 2, 1)], 2.5f);
  v.k_token_scales[token_scale_index(v, 0, 1, 0)] = 7.0f;
  c.copy_block(0, 2);
  EXPECT_EQ(v.k_token_scales[token_scale_index(v, 2, 1, 0)], 7.0f);
  KVCache d(s);
  d.copy_from(c);
  EXPECT_EQ(d.view().k_token_scales[token_scale_index(d.view(), 2, 1, 0)], 7.0f);
  std::vector<float> ks(std::size_t(s.num_blocks) * s.block_size * s.num_kv_heads, 0.5f), vs = ks;
  d.use_token_scales(ks.data(), vs.data());  // an engine's own scale arrays, read in place
  EXPECT_EQ(d.view().k_token_scales, ks.data());
}

TEST(KVCacheConstruction, MlaWithSeveralHeads) {
  KVCacheSpec s = small_kv_spec(DType::float32, KVLayout::MLA);
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"num_kv_heads=2", "1 for the MLA latent cache"}));
}

TEST(KVCacheConstruction, MlaValueWiderThanTheEntry) {
  KVCacheSpec s = small_kv_spec(DType::float32, KVLayout::MLA);
  s.num_kv_heads = 1;
  s.head_size_v = 9;
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"head_size_v=9", "<= head_size"}));
}

TEST(KVCacheConstruction, HugeSpecIsRefusedInsteadOfAZeroByteCache) {
  // attn.KVCache(2**30, block_size=2**28, num_kv_heads=1, head_size=32, dtype='float32') once
  // allocated 0 bytes (the product wrapped) and write_kv then wrote outside it.
  KVCacheSpec s = small_kv_spec();
  s.num_blocks = 1 << 30;
  s.block_size = 1 << 28;
  s.num_kv_heads = 1;
  s.head_size = 32;
  s.head_size_v = 0;
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"num_blocks=1073741824", "<= 16777216"}));
  s.num_blocks = 4;
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"block_size=268435456", "<= 65536"}));
}

TEST(KVCacheConstruction, SizesWithinEachLimitButBeyond64BitsTogether) {
  KVCacheSpec s = small_kv_spec();
  s.num_blocks = limits::kMaxNumBlocks;
  s.block_size = limits::kMaxBlockSize;
  s.num_kv_heads = limits::kMaxHeads;
  s.head_size = limits::kMaxHeadSize;
  s.head_size_v = 0;
  EXPECT_TRUE(throws_error([&] { s.bytes(); }, {"KVCache [16777216, 2, 65536, 4096, 2048] bytes=", "(beyond 64 bits)"}));
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"KVCache", "beyond 64 bits"}));
}

TEST(KVCacheConstruction, HeadSizeBeyondEveryBackend) {
  KVCacheSpec s = small_kv_spec();
  s.head_size = 100000;
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"head_size=100000", "<= 2048"}));
}

TEST(KVCacheConstruction, BytesMatchTheAllocation) {
  const KVCacheSpec s = small_kv_spec();
  EXPECT_EQ(s.bytes(), int64_t(KVCache(s).bytes()));
  EXPECT_EQ(s.bytes(), 4 * 2 * 4 * 2 * 8 * 4);
}

}  // namespace
