// KVCache (kv_cache.hpp): construction, scales and write_kv reject every bad input with an
// attn::Error naming the argument; good writes land in the declared layout (NHD / HND), fp8
// caches quantize with their scales, and nothing outside the given slots is touched.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "attn/backend.hpp"
#include "attn/kv_cache.hpp"
#include "attn/limits.hpp"
#include "attn/numeric.hpp"
#include "support/expect_error.hpp"

namespace {

using namespace attn;
using attn::test::throws_error;

KVCacheSpec small_spec(DType dtype = DType::float32, KVLayout layout = KVLayout::NHD) {
  return {.num_blocks = 4, .block_size = 4, .num_kv_heads = 2, .head_size = 8, .head_size_v = 6, .dtype = dtype,
          .layout = layout};
}

// --- construction ---

TEST(KVCacheSpecShape, DeclaredShapesPerLayout) {
  KVCacheSpec s = small_spec();
  EXPECT_EQ(s.shape(), (std::vector<int64_t>{4, 2, 4, 2, 8}));
  s.layout = KVLayout::HND;
  EXPECT_EQ(s.shape(), (std::vector<int64_t>{4, 2, 2, 4, 8}));
  s.layout = KVLayout::MLA;
  s.num_kv_heads = 1;
  EXPECT_EQ(s.shape(), (std::vector<int64_t>{4, 4, 8}));
  EXPECT_NE(s.to_string().find("MLA [4, 4, 8] float32"), std::string::npos) << s.to_string();
}

TEST(KVCacheSpecShape, PairLayoutDeclaresHndExtent) {
  KVCacheSpec s = small_spec(DType::bfloat16, KVLayout::HND_PAIRS);
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
  KVCacheSpec s = small_spec(DType::bfloat16);
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
  KVCacheSpec s = small_spec(DType::bfloat16, KVLayout::HND_PAIRS);
  s.block_size = 24;
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"block_size=24", "multiple of 16", "HND_PAIRS"}));
}

TEST(KVCacheConstruction, PairLayoutNeedsEvenHeadSizes) {
  KVCacheSpec s = small_spec(DType::bfloat16, KVLayout::HND_PAIRS);
  s.block_size = 16;
  s.head_size = 7;
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"head_size=7", "even", "HND_PAIRS"}));
  s.head_size = 8, s.head_size_v = 5;
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"head_size_v=5", "even", "HND_PAIRS"}));
}

TEST(KVCacheConstruction, ZeroBlocks) {
  KVCacheSpec s = small_spec();
  s.num_blocks = 0;
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"num_blocks=0", "> 0"}));
}

TEST(KVCacheConstruction, ZeroBlockSize) {
  KVCacheSpec s = small_spec();
  s.block_size = 0;
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"block_size=0", "> 0"}));
}

TEST(KVCacheConstruction, ZeroKvHeads) {
  KVCacheSpec s = small_spec();
  s.num_kv_heads = 0;
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"num_kv_heads=0", "> 0"}));
}

TEST(KVCacheConstruction, NegativeHeadSize) {
  KVCacheSpec s = small_spec();
  s.head_size = -8;
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"head_size=-8", "> 0"}));
}

TEST(KVCacheConstruction, NegativeHeadSizeV) {
  KVCacheSpec s = small_spec();
  s.head_size_v = -1;
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"head_size_v=-1", ">= 0"}));
}

TEST(KVCacheConstruction, IntegerStorageDType) {
  KVCacheSpec s = small_spec(DType::int8);
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"cache dtype=int8", "fp8_e4m3"}));
}

TEST(KVCacheConstruction, PerTokenHeadSpecs) {
  KVCacheSpec s = small_spec(DType::int8, KVLayout::HND_PAIRS);
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
  KVCache plain(small_spec());
  float k = 1, v = 1;
  EXPECT_TRUE(throws_error([&] { plain.use_token_scales(&k, &v); }, {"kv_cache_dtype=auto", "int8_per_token_head, fp8_per_token_head or int4_per_token_head"}));
  EXPECT_EQ(plain.k_token_scales(), nullptr);
}

TEST(KVCacheConstruction, PerTokenHeadFillCopyBlockAndCopy) {
  KVCacheSpec s = small_spec(DType::fp8_e4m3, KVLayout::HND);
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
  KVCacheSpec s = small_spec(DType::float32, KVLayout::MLA);
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"num_kv_heads=2", "1 for the MLA latent cache"}));
}

TEST(KVCacheConstruction, MlaValueWiderThanTheEntry) {
  KVCacheSpec s = small_spec(DType::float32, KVLayout::MLA);
  s.num_kv_heads = 1;
  s.head_size_v = 9;
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"head_size_v=9", "<= head_size"}));
}

TEST(KVCacheConstruction, HugeSpecIsRefusedInsteadOfAZeroByteCache) {
  // attn.KVCache(2**30, block_size=2**28, num_kv_heads=1, head_size=32, dtype='float32') once
  // allocated 0 bytes (the product wrapped) and write_kv then wrote outside it.
  KVCacheSpec s = small_spec();
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
  KVCacheSpec s = small_spec();
  s.num_blocks = limits::kMaxNumBlocks;
  s.block_size = limits::kMaxBlockSize;
  s.num_kv_heads = limits::kMaxHeads;
  s.head_size = limits::kMaxHeadSize;
  s.head_size_v = 0;
  EXPECT_TRUE(throws_error([&] { s.bytes(); }, {"KVCache [16777216, 2, 65536, 4096, 2048] bytes=", "(beyond 64 bits)"}));
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"KVCache", "beyond 64 bits"}));
}

TEST(KVCacheConstruction, HeadSizeBeyondEveryBackend) {
  KVCacheSpec s = small_spec();
  s.head_size = 100000;
  EXPECT_TRUE(throws_error([&] { KVCache c(s); }, {"head_size=100000", "<= 2048"}));
}

TEST(KVCacheConstruction, BytesMatchTheAllocation) {
  const KVCacheSpec s = small_spec();
  EXPECT_EQ(s.bytes(), int64_t(KVCache(s).bytes()));
  EXPECT_EQ(s.bytes(), 4 * 2 * 4 * 2 * 8 * 4);
}

// --- scales ---

struct KVCacheScales : ::testing::Test {
  KVCacheSpec spec = [] {
    KVCacheSpec s = small_spec(DType::fp8_e4m3);
    s.kv_cache_dtype = KVCacheDType::fp8_e4m3;
    return s;
  }();
};

TEST_F(KVCacheScales, DefaultIsOnePerHead) {
  KVCache c(spec);
  EXPECT_EQ(c.k_scales(), (std::vector<float>{1.0f, 1.0f}));
  EXPECT_EQ(c.v_scales(), (std::vector<float>{1.0f, 1.0f}));
}

TEST_F(KVCacheScales, PerTensorScaleIsReplicated) {
  KVCache c(spec);
  c.set_scales({0.5f}, {2.0f});
  EXPECT_EQ(c.k_scales(), (std::vector<float>{0.5f, 0.5f}));
  EXPECT_EQ(c.view().v_scales[1], 2.0f);
}

TEST_F(KVCacheScales, NaNScale) {
  KVCache c(spec);
  EXPECT_TRUE(throws_error([&] { c.set_scales({std::nanf("")}, {1.0f}); }, {"k_scale[0]", "nan", "a finite scale >= 1.17549e-38"}));
}

TEST_F(KVCacheScales, InfiniteScale) {
  KVCache c(spec);
  EXPECT_TRUE(throws_error([&] { c.set_scales({1.0f}, {std::numeric_limits<float>::infinity()}); },
                           {"v_scale[0]", "inf", "a finite scale >= 1.17549e-38"}));
}

TEST_F(KVCacheScales, ZeroScale) {
  KVCache c(spec);
  EXPECT_TRUE(throws_error([&] { c.set_scales({0.0f}, {1.0f}); }, {"k_scale[0]=0", "a finite scale >= 1.17549e-38"}));
}

TEST_F(KVCacheScales, SubnormalScaleWouldSaturateEveryValue) {
  // 1e-45 passed "finite and > 0", but 1 / 1e-45 is inf: every stored value became the fp8 maximum.
  KVCache c(spec);
  EXPECT_TRUE(throws_error([&] { c.set_scales({1e-45f}, {1.0f}); }, {"k_scale[0]=1.4013e-45", "the smallest normal float"}));
  EXPECT_NO_THROW(c.set_scales({std::numeric_limits<float>::min()}, {1.0f}));
}

TEST_F(KVCacheScales, NegativeScale) {
  KVCache c(spec);
  EXPECT_TRUE(throws_error([&] { c.set_scales({1.0f}, {-0.5f}); }, {"v_scale[0]=-0.5", "a finite scale >= 1.17549e-38"}));
}

TEST_F(KVCacheScales, WrongCount) {
  KVCache c(spec);
  EXPECT_TRUE(throws_error([&] { c.set_scales({1.0f, 1.0f, 1.0f}, {1.0f}); }, {"k_scale.size()=3", "num_kv_heads = 2"}));
}

TEST_F(KVCacheScales, EmptyScales) {
  KVCache c(spec);
  EXPECT_TRUE(throws_error([&] { c.set_scales({}, {1.0f}); }, {"k_scale.size()=0"}));
}

TEST_F(KVCacheScales, PerHeadScalesOnAPerTensorCache) {
  KVCache c(spec);
  EXPECT_TRUE(throws_error([&] { c.set_scales({1.0f, 2.0f}, {1.0f}); }, {"k_scale.size()=2", "without per-head scales"}));
}

TEST_F(KVCacheScales, PerHeadScalesAccepted) {
  spec.per_head_scales = true;
  KVCache c(spec);
  c.set_scales({1.0f, 2.0f}, {3.0f, 4.0f});
  EXPECT_EQ(c.k_scales(), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(c.v_scales(), (std::vector<float>{3.0f, 4.0f}));
}

// --- write ---

// k/v for `n` tokens of the small spec, values k = 100*t + 10*h + d, v = -(that).
struct KVWrite : ::testing::Test {
  KVCacheSpec spec = small_spec();
  int n = 3;
  std::vector<float> k, v;
  BatchMetadata md;

  void SetUp() override { make(n); }
  void make(int tokens) {
    n = tokens;
    k.assign(std::size_t(n) * 2 * 8, 0.0f);
    v.assign(std::size_t(n) * 2 * 6, 0.0f);
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < 2; ++h) {
        for (int d = 0; d < 8; ++d) k[(t * 2 + h) * 8 + d] = float(100 * t + 10 * h + d);
        for (int d = 0; d < 6; ++d) v[(t * 2 + h) * 6 + d] = -float(100 * t + 10 * h + d);
      }
    md = BatchMetadata::build({SequenceSpec{0, n, {2, 0}}}, spec.block_size, spec.num_blocks);
  }
  TensorView kv() { return TensorView::contiguous(k.data(), DType::float32, {n, 2, 8}); }
  TensorView vv() { return TensorView::contiguous(v.data(), DType::float32, {n, 2, 6}); }
};

TEST_F(KVWrite, LandsInTheSlotsOfTheSlotMappingNHD) {
  KVCache c(spec);
  c.fill(std::nanf(""));
  c.write(kv(), vv(), md);
  const PagedKV p = c.view();
  const float* base = static_cast<const float*>(p.base);
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < 2; ++h) {
      const int64_t e = 2 * p.block_stride + t * p.token_stride + h * p.head_stride;  // block 2 holds tokens 0..3
      for (int d = 0; d < 8; ++d) EXPECT_EQ(base[e + d], float(100 * t + 10 * h + d));
      for (int d = 0; d < 6; ++d) EXPECT_EQ(base[e + p.v_offset + d], -float(100 * t + 10 * h + d));
    }
  // Nothing else was written: every other block is still poison.
  for (int b : {0, 1, 3})
    for (int64_t i = 0; i < p.block_stride; ++i) ASSERT_TRUE(std::isnan(base[b * p.block_stride + i])) << b << " " << i;
}

TEST_F(KVWrite, LandsInTheSlotsOfTheSlotMappingHND) {
  spec.layout = KVLayout::HND;
  KVCache c(spec);
  c.write(kv(), vv(), md);
  const PagedKV p = c.view();
  EXPECT_EQ(p.token_stride, 8);
  EXPECT_EQ(p.head_stride, 4 * 8);
  const float* base = static_cast<const float*>(p.base);
  EXPECT_EQ(base[2 * p.block_stride + 1 * p.head_stride + 2 * p.token_stride + 5], 100.0f * 2 + 10 + 5);
}

TEST_F(KVWrite, LandsInPairOrderHndPairs) {
  // K[d/2][t][2] and V[t/2][d][2] inside each (block, KV head) run; rows read back by gather.
  spec.layout = KVLayout::HND_PAIRS;
  spec.block_size = 16;
  make(19);  // block 2 full, 3 tokens in block 0
  for (DType dt : {DType::float32, DType::bfloat16, DType::fp8_e4m3}) {
    SCOPED_TRACE(std::string(to_string(dt)));
    spec.dtype = dt;
    KVCache c(spec);
    c.fill(std::nanf(""));
    c.write(kv(), vv(), md);
    const PagedKV p = c.view();
    EXPECT_EQ(p.layout, KVLayout::HND_PAIRS);
    const int64_t w = 8, run = 16 * w;  // entry width, elements of one (block, head) K or V run
    auto at = [&](int64_t e) { return load_as_float(p.base, dt, e); };
    auto exact = [&](float x) {  // what the storage dtype holds of x (write stores the same way)
      uint32_t cell = 0;
      store_from_float(&cell, dt, 0, x);
      return load_as_float(&cell, dt, 0);
    };
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < 2; ++h) {
        const int64_t blk = t < 16 ? 2 : 0, bt = t % 16;
        const int64_t k_run = blk * p.block_stride + h * run, v_run = k_run + 2 * run;
        for (int d = 0; d < 8; ++d) EXPECT_EQ(at(k_run + (d / 2) * 32 + bt * 2 + d % 2), exact(float(100 * t + 10 * h + d))) << t << h << d;
        for (int d = 0; d < 6; ++d) EXPECT_EQ(at(v_run + (bt / 2) * 2 * w + 2 * d + bt % 2), exact(-float(100 * t + 10 * h + d))) << t << h << d;
        std::vector<float> row(8);
        std::vector<char> raw(8 * dtype_size(dt));
        gather_kv_vector(p, blk, bt, h, false, 8, raw.data());
        for (int d = 0; d < 8; ++d) EXPECT_EQ(load_as_float(raw.data(), dt, d), exact(float(100 * t + 10 * h + d)));
        gather_kv_vector(p, blk, bt, h, true, 6, raw.data());
        for (int d = 0; d < 6; ++d) EXPECT_EQ(load_as_float(raw.data(), dt, d), exact(-float(100 * t + 10 * h + d)));
      }
    // Blocks 1 and 3 untouched.
    for (int b : {1, 3})
      for (int64_t i = 0; i < p.block_stride; ++i) ASSERT_TRUE(std::isnan(at(b * p.block_stride + i))) << b << " " << i;
  }
}

TEST_F(KVWrite, NegativeSlotsAreSkipped) {
  KVCache c(spec);
  c.fill(7.0f);
  md.slot_mapping[1] = -1;
  c.write(kv(), vv(), md);
  const PagedKV p = c.view();
  EXPECT_EQ(static_cast<const float*>(p.base)[2 * p.block_stride + 1 * p.token_stride], 7.0f);
}

TEST_F(KVWrite, Fp8QuantizesWithTheScale) {
  spec.dtype = DType::fp8_e4m3;
  spec.kv_cache_dtype = KVCacheDType::fp8;
  KVCache c(spec);
  c.set_scales({2.0f}, {4.0f});
  c.write(kv(), vv(), md);
  const PagedKV p = c.view();
  const int64_t e = 2 * p.block_stride + 1 * p.token_stride + 1 * p.head_stride + 3;  // t=1 h=1 d=3: k=113, v=-113
  EXPECT_EQ(load_as_float(p.base, p.dtype, e) * p.k_scales[1], fp8_e4m3_to_f32(f32_to_fp8_e4m3(113.0f / 2.0f)) * 2.0f);
  EXPECT_EQ(load_as_float(p.base, p.dtype, e + p.v_offset) * p.v_scales[1],
            fp8_e4m3_to_f32(f32_to_fp8_e4m3(-113.0f / 4.0f)) * 4.0f);
}

TEST_F(KVWrite, Fp8SaturationIsCounted) {
  spec.dtype = DType::fp8_e4m3;
  spec.kv_cache_dtype = KVCacheDType::fp8;
  KVCache c(spec);
  c.write(kv(), vv(), md);  // |values| <= 217 with scale 1: within ±448
  EXPECT_EQ(c.saturated_values(), 0);
  c.set_scales({0.25f}, {1.0f});
  c.write(kv(), vv(), md);
  // k / 0.25 > 448 where k > 112: token 1 head 1 d = 3..7 (5 values) and all 16 of token 2.
  EXPECT_EQ(c.saturated_values(), 21);
  c.write(kv(), vv(), md);
  EXPECT_EQ(c.saturated_values(), 42);  // cumulative
  KVCache bf16(small_spec(DType::bfloat16));
  bf16.write(kv(), vv(), md);
  EXPECT_EQ(bf16.saturated_values(), 0);
}

TEST_F(KVWrite, ExternalStorageIsWrittenInPlace) {
  // An engine-owned tensor: the cache reads and writes it, allocating nothing.
  Buffer engine(spec.dtype, spec.shape());
  KVCache c(spec, engine.data());
  EXPECT_FALSE(c.owns_storage());
  EXPECT_EQ(c.data(), engine.data());
  EXPECT_EQ(c.bytes(), std::size_t(spec.bytes()));
  c.write(kv(), vv(), md);
  const PagedKV p = c.view();
  EXPECT_EQ(p.base, engine.data());
  // t=1 h=1 d=3 lands in block 2 of the engine's memory.
  EXPECT_EQ(static_cast<const float*>(engine.data())[2 * p.block_stride + p.token_stride + p.head_stride + 3], 113.0f);
}

TEST_F(KVWrite, ExternalStorageMustBeAlignedAndPresent) {
  Buffer engine(spec.dtype, {int64_t(spec.bytes() / 4) + 16});
  EXPECT_TRUE(throws_error([&] { KVCache(spec, static_cast<char*>(engine.data()) + 4); },
                           {"external storage address=", "a multiple of 64 bytes"}));
  EXPECT_TRUE(throws_error([&] { KVCache(spec, nullptr); }, {"external storage=null", "expected a pointer to"}));
}

TEST_F(KVWrite, SlotOutOfRange) {
  KVCache c(spec);
  md.slot_mapping[2] = 16;  // 4 blocks x 4 slots
  EXPECT_TRUE(throws_error([&] { c.write(kv(), vv(), md); }, {"metadata.slot_mapping[2]=16", "[0, 16)"}));
}

TEST_F(KVWrite, SlotBelowMinusOne) {
  KVCache c(spec);
  md.slot_mapping[0] = -2;
  EXPECT_TRUE(throws_error([&] { c.write(kv(), vv(), md); }, {"metadata.slot_mapping[0]=-2", "-1 (skip)"}));
}

TEST_F(KVWrite, DuplicateSlots) {
  KVCache c(spec);
  c.fill(7.0f);
  md.slot_mapping[2] = md.slot_mapping[0];
  EXPECT_TRUE(throws_error([&] { c.write(kv(), vv(), md); }, {"metadata.slot_mapping", "distinct slots"}));
  EXPECT_EQ(static_cast<const float*>(c.data())[0], 7.0f) << "validation happens before any write";
}

TEST_F(KVWrite, SlotMappingShorterThanTokens) {
  KVCache c(spec);
  md.slot_mapping.pop_back();
  EXPECT_TRUE(throws_error([&] { c.write(kv(), vv(), md); }, {"metadata.slot_mapping.size()=2", "num_tokens = 3"}));
}

TEST_F(KVWrite, KeyTokensDisagreeWithMetadata) {
  KVCache c(spec);
  TensorView bad = TensorView::contiguous(k.data(), DType::float32, {2, 2, 8});
  EXPECT_TRUE(throws_error([&] { c.write(bad, vv(), md); }, {"k.shape=[2, 2, 8]", "dimension 0 to be 3"}));
}

TEST_F(KVWrite, KeyHeadsDisagreeWithCache) {
  KVCache c(spec);
  TensorView bad = TensorView::contiguous(k.data(), DType::float32, {3, 1, 16});
  EXPECT_TRUE(throws_error([&] { c.write(bad, vv(), md); }, {"k.shape=[3, 1, 16]", "dimension 1 to be 2"}));
}

TEST_F(KVWrite, ValueHeadSizeDisagreesWithCache) {
  KVCache c(spec);
  TensorView bad = TensorView::contiguous(v.data(), DType::float32, {3, 3, 4});
  EXPECT_TRUE(throws_error([&] { c.write(kv(), bad, md); }, {"v.shape=[3, 3, 4]"}));
}

TEST_F(KVWrite, KeyDTypeNotAFloat) {
  KVCache c(spec);
  TensorView bad = kv();
  bad.dtype = DType::int32;
  EXPECT_TRUE(throws_error([&] { c.write(bad, vv(), md); }, {"k.dtype=int32", "float32, float16, bfloat16"}));
}

TEST_F(KVWrite, ValueFp8NotAcceptedAsInput) {
  KVCache c(spec);
  TensorView bad = vv();
  bad.dtype = DType::fp8_e4m3;
  EXPECT_TRUE(throws_error([&] { c.write(kv(), bad, md); }, {"v.dtype=fp8_e4m3"}));
}

TEST_F(KVWrite, KeyLastDimensionNotContiguous) {
  KVCache c(spec);
  TensorView bad = kv();
  bad.strides[2] = 2;
  EXPECT_TRUE(throws_error([&] { c.write(bad, vv(), md); }, {"k.strides=2", "stride 1"}));
}

TEST_F(KVWrite, KeyIsACudaTensor) {
  KVCache c(spec);
  TensorView bad = kv();
  bad.device = DeviceKind::cuda;
  EXPECT_TRUE(throws_error([&] { c.write(bad, vv(), md); }, {"k.device", "a CPU tensor"}));
}

TEST_F(KVWrite, KeyDataNull) {
  KVCache c(spec);
  TensorView bad = kv();
  bad.data = nullptr;
  EXPECT_TRUE(throws_error([&] { c.write(bad, vv(), md); }, {"k.data", "non-null"}));
}

TEST_F(KVWrite, StridedRowsAreRead) {
  // A [3, 2, 8] view over every other row of a [6, 2, 8] tensor (a non-contiguous token dim).
  std::vector<float> wide(6 * 2 * 8, -1.0f);
  for (int t = 0; t < 3; ++t)
    for (int i = 0; i < 16; ++i) wide[std::size_t(t) * 32 + i] = k[std::size_t(t) * 16 + i];
  TensorView strided = TensorView::contiguous(wide.data(), DType::float32, {3, 2, 8});
  strided.strides[0] = 32;
  KVCache c(spec);
  c.write(strided, vv(), md);
  const PagedKV p = c.view();
  EXPECT_EQ(static_cast<const float*>(p.base)[2 * p.block_stride + 2 * p.token_stride + 1 * p.head_stride + 7], 217.0f);
}

// --- copy_block / fill ---

TEST(KVCacheCopyBlock, CopiesKAndVOfTheBlock) {
  KVCache c(small_spec());
  const PagedKV p = c.view();
  float* base = static_cast<float*>(c.data());
  for (int64_t i = 0; i < p.block_stride; ++i) base[1 * p.block_stride + i] = float(i);
  c.copy_block(1, 3);
  for (int64_t i = 0; i < p.block_stride; ++i) ASSERT_EQ(base[3 * p.block_stride + i], float(i));
}

TEST(KVCacheCopyBlock, SourceOutOfRange) {
  KVCache c(small_spec());
  EXPECT_TRUE(throws_error([&] { c.copy_block(4, 0); }, {"src_block=4", "[0, 4)"}));
}

TEST(KVCacheCopyBlock, DestinationNegative) {
  KVCache c(small_spec());
  EXPECT_TRUE(throws_error([&] { c.copy_block(0, -1); }, {"dst_block=-1", "[0, 4)"}));
}

TEST(KVCacheFill, PoisonsEveryElement) {
  KVCache c(small_spec(DType::bfloat16));
  c.fill(std::nanf(""));
  const int64_t n = int64_t(c.bytes() / 2);
  for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(std::isnan(load_as_float(c.data(), DType::bfloat16, i)));
}

}  // namespace

// --- caches over an engine's strided memory (KVCache(spec, StridedKV)) ---

namespace strided {
/// vLLM's head-major block: [heads][tokens][K | V] rows of head_size + head_size_v elements.
StridedKV rows_of(std::vector<float>& mem, const KVCacheSpec& s) {
  StridedKV m;
  m.memory = m.k = mem.data();
  m.bytes = mem.size() * sizeof(float);
  const int64_t row = s.head_size + s.v_width();
  m.token = row, m.head = s.block_size * row, m.block = int64_t(s.num_kv_heads) * s.block_size * row;
  m.v_offset = s.head_size;
  return m;
}
}  // namespace strided

TEST(KVCacheStrided, ReadsAndWritesTheEngineRowsInPlace) {
  KVCacheSpec s = small_spec(DType::float32, KVLayout::HND);
  std::vector<float> mem(std::size_t(s.num_blocks) * s.num_kv_heads * s.block_size * (s.head_size + s.v_width()) + 7, -1.0f);
  KVCache c(s, strided::rows_of(mem, s));
  EXPECT_TRUE(c.strided());
  EXPECT_FALSE(c.owns_storage());
  std::vector<float> k(2 * 2 * 8), v(2 * 2 * 6);
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = float(i);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 100.0f + float(i);
  const BatchMetadata md = BatchMetadata::build({SequenceSpec{5, 2, {1, 3}}}, 4, 4, true);  // slots 13, 14: block 3
  c.write(TensorView::contiguous(k.data(), DType::float32, {2, 2, 8}), TensorView::contiguous(v.data(), DType::float32, {2, 2, 6}), md);
  // token 1 of block 3, head 1: row at 3*block + 1*head + 1*token; K then V in the one row.
  const std::size_t row = 3 * (2 * 4 * 14) + 1 * (4 * 14) + 1 * 14;
  EXPECT_EQ(mem[row + 0], k[(0 * 2 + 1) * 8 + 0]);
  EXPECT_EQ(mem[row + 7], k[(0 * 2 + 1) * 8 + 7]);
  EXPECT_EQ(mem[row + 8], v[(0 * 2 + 1) * 6 + 0]);
  EXPECT_EQ(mem[row + 13], v[(0 * 2 + 1) * 6 + 5]);
  EXPECT_EQ(mem.back(), -1.0f);  // the memory past the rows is the engine's
  c.copy_block(3, 0);
  EXPECT_EQ(mem[1 * (4 * 14) + 1 * 14 + 8], v[(0 * 2 + 1) * 6 + 0]);
  c.fill(2.0f);
  EXPECT_EQ(mem[row], 2.0f);
  EXPECT_EQ(mem.back(), -1.0f);  // fill touches the addressed elements only
  KVCache dense(s);
  EXPECT_TRUE(throws_error([&] { dense.copy_from(c); }, {"strided"}));
}

TEST(KVCacheStrided, RefusesMemoryThatDoesNotHoldEveryElement) {
  KVCacheSpec s = small_spec(DType::float32, KVLayout::HND);
  std::vector<float> mem(std::size_t(s.num_blocks) * s.num_kv_heads * s.block_size * (s.head_size + s.v_width()));
  StridedKV m = strided::rows_of(mem, s);
  { KVCache ok(s, m); }
  StridedKV short_mem = m;
  short_mem.bytes -= sizeof(float);  // the last V element falls outside
  EXPECT_TRUE(throws_error([&] { KVCache c(s, short_mem); }, {"V elements"}));
  StridedKV wide = m;
  wide.token += 1;  // rows drift past the end
  EXPECT_TRUE(throws_error([&] { KVCache c(s, wide); }, {"elements"}));
  StridedKV negative = m;
  negative.head = -1;
  EXPECT_TRUE(throws_error([&] { KVCache c(s, negative); }, {"strides"}));
  StridedKV v_before = m;
  v_before.v_offset = -1;  // V one element before the memory
  EXPECT_TRUE(throws_error([&] { KVCache c(s, v_before); }, {"V elements"}));
  StridedKV huge = m;
  huge.block = int64_t(1) << 62;
  EXPECT_TRUE(throws_error([&] { KVCache c(s, huge); }, {"block stride"}));
  StridedKV null_base = m;
  null_base.k = nullptr;
  EXPECT_TRUE(throws_error([&] { KVCache c(s, null_base); }, {"strided memory"}));
  KVCacheSpec pairs = s;
  pairs.layout = KVLayout::HND_PAIRS;
  pairs.block_size = 16;
  EXPECT_TRUE(throws_error([&] { KVCache c(pairs, m); }, {"layout"}));
}
