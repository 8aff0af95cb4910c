// KVCache with kv_cache_dtype fp8_ds_mla (DeepSeek V3.2's 656-byte MLA entry): spec checks name
// the field, bytes() and shape() agree, write() quantizes the latent per 128-value tile (scale =
// amax / 448) and stores rope as bf16, and an all-zero tile stays zero.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "attn/kv_cache.hpp"
#include "attn/numeric.hpp"
#include "support/expect_error.hpp"

namespace {

using namespace attn;
using attn::test::throws_error;

constexpr int kWidth = ds_mla::kRank + ds_mla::kRope;

KVCacheSpec ds_spec() {
  return {.num_blocks = 3, .block_size = 5, .num_kv_heads = 1, .head_size = kWidth, .head_size_v = ds_mla::kRank,
          .dtype = DType::fp8_e4m3, .kv_cache_dtype = KVCacheDType::fp8_ds_mla, .layout = KVLayout::MLA};
}

// Writes `rows` ([n][576] floats) to slots 0..n-1 and returns the cache.
KVCache write_rows(const std::vector<float>& rows, DType src_dtype = DType::float32) {
  KVCache cache(ds_spec());
  const int n = int(rows.size() / kWidth);
  Buffer k(src_dtype, {n, 1, kWidth});
  for (size_t i = 0; i < rows.size(); ++i) store_from_float(k.data(), src_dtype, int64_t(i), rows[i]);
  std::vector<SequenceSpec> seqs{{0, n, {0, 1, 2}}};
  const BatchMetadata md = BatchMetadata::build(seqs, 5, 3);
  cache.write(k.view(), k.view(), md);
  return cache;
}

const uint8_t* entry_of(const KVCache& c, int slot) {
  const PagedKV v = c.view();
  return static_cast<const uint8_t*>(v.base) + (slot / v.block_size) * v.block_stride + (slot % v.block_size) * v.token_stride;
}

TEST(KVCacheDsMla, EntryLayoutBytesAndShapeAgree) {
  const KVCacheSpec s = ds_spec();
  EXPECT_EQ(ds_mla::kEntryBytes, 656);
  EXPECT_EQ(s.shape(), (std::vector<int64_t>{3, 5, 656}));
  EXPECT_EQ(s.bytes(), 3 * 5 * 656);
  KVCache c(s);
  EXPECT_EQ(c.bytes(), std::size_t(s.bytes()));
  const PagedKV v = c.view();
  EXPECT_TRUE(v.ds_mla);
  EXPECT_EQ(v.token_stride, 656);
  EXPECT_EQ(v.block_stride, 5 * 656);
  EXPECT_EQ(v.head_size, kWidth);
  EXPECT_EQ(v.head_size_v, ds_mla::kRank);
  KVCacheSpec plain = s;
  plain.kv_cache_dtype = KVCacheDType::fp8_e4m3;
  EXPECT_FALSE(KVCache(plain).view().ds_mla);
}

TEST(KVCacheDsMla, ValidateNamesFieldValueAndExpectation) {
  KVCacheSpec head = ds_spec();
  head.head_size = 640;
  EXPECT_TRUE(throws_error([&] { head.validate(); }, {"head_size=640", "576", "fp8_ds_mla"}));
  KVCacheSpec v = ds_spec();
  v.head_size_v = 256;
  EXPECT_TRUE(throws_error([&] { v.validate(); }, {"head_size_v=256", "512", "fp8_ds_mla"}));
  KVCacheSpec layout = ds_spec();
  layout.layout = KVLayout::NHD;
  EXPECT_TRUE(throws_error([&] { layout.validate(); }, {"layout=NHD", "MLA", "fp8_ds_mla"}));
  KVCacheSpec dtype = ds_spec();
  dtype.dtype = DType::bfloat16;
  EXPECT_TRUE(throws_error([&] { KVCache c(dtype); }, {"cache dtype=bfloat16", "fp8_e4m3", "fp8_ds_mla"}));
}

TEST(KVCacheDsMla, WriteRoundTripsWithinE4m3ErrorPerTileAndRopeExactInBf16) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  const int n = 7;
  std::vector<float> rows(size_t(n) * kWidth);
  for (int t = 0; t < n; ++t) {
    for (int d = 0; d < kWidth; ++d) {
      // Tiles of very different magnitude: one shared scale would lose the small ones.
      const float mag = d < ds_mla::kRank ? std::pow(10.0f, float(d / ds_mla::kTile) - 2.0f) : 3.0f;
      rows[size_t(t) * kWidth + d] = uni(rng) * mag;
    }
  }
  for (DType src : {DType::float32, DType::bfloat16}) {
    // The bf16 source is rounded first: compare against what was handed over.
    std::vector<float> given(rows);
    for (float& x : given) x = src == DType::bfloat16 ? bf16_to_f32(f32_to_bf16(x)) : x;
    const KVCache c = write_rows(rows, src);
    EXPECT_EQ(c.saturated_values(), 0);
    for (int t = 0; t < n; ++t) {
      const uint8_t* e = entry_of(c, t);
      float back[kWidth];
      ds_mla::dequantize_entry(e, back);
      const float* in = given.data() + size_t(t) * kWidth;
      for (int tile = 0; tile < ds_mla::kTiles; ++tile) {
        float amax = 0;
        for (int i = 0; i < ds_mla::kTile; ++i) amax = std::max(amax, std::fabs(in[tile * ds_mla::kTile + i]));
        EXPECT_FLOAT_EQ(ds_mla::tile_scale(e, tile), amax / 448.0f);
        for (int i = 0; i < ds_mla::kTile; ++i) {
          const int d = tile * ds_mla::kTile + i;
          // e4m3: 3 mantissa bits, half an ulp = 2^-4 relative; subnormals below 2^-6 · scale.
          const float bound = std::max(std::fabs(in[d]) / 16.0f, amax / 448.0f * std::ldexp(1.0f, -10));
          EXPECT_LE(std::fabs(back[d] - in[d]), bound) << "token " << t << " dim " << d;
        }
      }
      for (int i = 0; i < ds_mla::kRope; ++i)
        EXPECT_EQ(back[ds_mla::kRank + i], bf16_to_f32(f32_to_bf16(in[ds_mla::kRank + i])));
    }
  }
}

TEST(KVCacheDsMla, ZeroTileStaysZeroWithAFiniteScale) {
  std::vector<float> row(kWidth, 0.0f);
  for (int i = ds_mla::kTile; i < 2 * ds_mla::kTile; ++i) row[size_t(i)] = 0.5f;  // tile 1 only
  const KVCache c = write_rows(row);
  const uint8_t* e = entry_of(c, 0);
  float back[kWidth];
  ds_mla::dequantize_entry(e, back);
  for (int tile : {0, 2, 3}) {
    const float s = ds_mla::tile_scale(e, tile);
    EXPECT_TRUE(std::isfinite(s) && s > 0.0f) << "tile " << tile << " scale " << s;
    for (int i = 0; i < ds_mla::kTile; ++i) EXPECT_EQ(back[tile * ds_mla::kTile + i], 0.0f);
  }
  for (int i = ds_mla::kTile; i < 2 * ds_mla::kTile; ++i) EXPECT_EQ(back[i], 0.5f);
}

TEST(KVCacheDsMla, FillPoisonReadsBackAsNaNEverywhere) {
  KVCache c(ds_spec());
  c.fill(std::nanf(""));
  float back[kWidth];
  ds_mla::dequantize_entry(entry_of(c, 14), back);
  for (float x : back) EXPECT_TRUE(std::isnan(x));
}

}  // namespace
