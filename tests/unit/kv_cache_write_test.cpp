// KVCache::write (write_kv): good writes land in the declared layout (NHD / HND / HND_PAIRS), fp8
// caches quantize with their scales, nothing outside the given slots is touched, and every bad
// input is refused with an attn::Error naming the argument.
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

// --- write ---

// k/v for `n` tokens of the small spec, values k = 100*t + 10*h + d, v = -(that).
struct KVWrite : ::testing::Test {
  KVCacheSpec spec = small_kv_spec();
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
  KVCache bf16(small_kv_spec(DType::bfloat16));
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

}  // namespace
