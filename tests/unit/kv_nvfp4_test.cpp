// nvfp4 / nvfp4_4over6: e2m1 rounding, the block-scale choice, the quantizer's edge cases, the
// spec and what write_kv stores.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "attn/kv_cache.hpp"
#include "attn/numeric.hpp"
#include "attn/backend.hpp"
#include "attn/tensor.hpp"
#include "support/expect_error.hpp"
#include "support/test_support.hpp"

namespace attn {
namespace {

using test::throws_error;

KVCacheSpec nvfp4_spec(KVLayout layout = KVLayout::HND, int head = 64, KVCacheDType k = KVCacheDType::nvfp4) {
  return test::byte_cache_spec(k, layout, head);
}

TEST(Nvfp4, E2m1RoundsToNearestEvenAndSaturates) {
  // cvt.rn.satfinite.e2m1: the ties 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5 go to the even code.
  const std::pair<float, int> cases[] = {{0.0f, 0},  {0.25f, 0}, {0.26f, 1}, {0.74f, 1}, {0.75f, 2}, {1.25f, 2}, {1.26f, 3},
                                         {1.75f, 4}, {2.5f, 4},  {2.51f, 5}, {3.5f, 6},  {5.0f, 6},  {5.01f, 7}, {6.0f, 7},
                                         {1e9f, 7},  {-0.1f, 8}, {-1.0f, 10}, {-6.5f, 15}};
  for (auto [x, code] : cases) EXPECT_EQ(int(nvfp4::e2m1_code(x)), code) << x;
  for (int c = 0; c < 16; ++c) EXPECT_EQ(nvfp4::e2m1_code(nvfp4::e2m1_value(c)), c == 8 ? 8 : c) << c;
}

TEST(Nvfp4, EachBlockScalesByItsOwnMax) {
  // Block 0: max 3 -> scale e4m3(3 / 6) = 0.5, values on the e2m1 grid times 0.5 read back exactly.
  // Block 1: all zero -> scale 0, codes 0. Global scale 2 (inv_g 0.5) for the whole call.
  float x[32] = {};
  const float grid[16] = {3.0f, -1.5f, 0.25f, 0.5f, 0.75f, 1.0f, -2.0f, 1.5f, 0, 0, 0, 0, 0, 0, 0, -0.25f};
  for (int i = 0; i < 16; ++i) x[i] = 2.0f * grid[i];
  uint8_t row[nvfp4::row_bytes(32)];
  int64_t bad = 0;
  EXPECT_EQ(nvfp4::quantize(x, 32, 0.5f, false, row, &bad), 0);
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(row[16], f32_to_fp8_e4m3(0.5f));
  EXPECT_EQ(row[17], 0);
  EXPECT_EQ(row[0], uint8_t(7 | (13 << 4)));  // 6 (code 7) in the low nibble, -3 (code 8 | 5) in the high one
  float back[32];
  nvfp4::dequantize(row, 32, back);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(back[i] * 2.0f, x[i]) << i;
}

TEST(Nvfp4, FourOverSixKeepsTheScaleWithTheSmallerError) {
  // {4, 3}: max / 6 gives scale e4m3(0.667) = 0.6875 and reads 4.125, 2.75; max / 4 gives scale 1,
  // exact. nvfp4 always takes max / 6; nvfp4_4over6 takes max / 4 here.
  float x[16] = {4.0f, 3.0f};
  uint8_t six[nvfp4::row_bytes(16)], four[nvfp4::row_bytes(16)];
  nvfp4::quantize(x, 16, 1.0f, false, six, nullptr);
  nvfp4::quantize(x, 16, 1.0f, true, four, nullptr);
  EXPECT_EQ(six[8], f32_to_fp8_e4m3(4.0f / 6.0f));
  EXPECT_EQ(fp8_e4m3_to_f32(six[8]), 0.6875f);
  EXPECT_EQ(four[8], f32_to_fp8_e4m3(1.0f));
  float back[16];
  nvfp4::dequantize(four, 16, back);
  EXPECT_EQ(back[0], 4.0f);
  EXPECT_EQ(back[1], 3.0f);
  // Where max / 6 is better it stays: 6 and 1 at scale 1 are exact, at max / 4 (1.5) 6 is 4 · 1.5
  // but 1 reads 1.5 or 0.75.
  float y[16] = {6.0f, 1.0f};
  nvfp4::quantize(y, 16, 1.0f, true, four, nullptr);
  EXPECT_EQ(four[8], f32_to_fp8_e4m3(1.0f));
}

TEST(Nvfp4, QuantizerEdgeCases) {
  uint8_t row[nvfp4::row_bytes(32)];
  float x[32];
  for (int i = 0; i < 32; ++i) x[i] = 0.1f * float(i + 1);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[9] = -std::numeric_limits<float>::infinity();
  int64_t bad = 0;
  nvfp4::quantize(x, 32, 1.0f, false, row, &bad);
  EXPECT_EQ(bad, 2);  // both in block 0: it reads NaN, block 1 is untouched
  EXPECT_EQ(row[16], nvfp4::kNanScale);
  for (int j = 0; j < 8; ++j) EXPECT_EQ(row[j], 0);
  float back[32];
  nvfp4::dequantize(row, 32, back);
  for (int i = 0; i < 16; ++i) EXPECT_TRUE(std::isnan(back[i])) << i;
  for (int i = 16; i < 32; ++i) EXPECT_NEAR(back[i], x[i], 0.25f * x[i]) << i;
  // Denormals: the block scale underflows e4m3 to 0, the block reads 0.
  float tiny[16] = {1e-40f, -1e-40f, 1e-39f};
  nvfp4::quantize(tiny, 16, 1.0f, false, row, nullptr);
  nvfp4::dequantize(row, 16, back);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(back[i], 0.0f);
  // A block scale beyond e4m3's 448 saturates: values past 6 · 448 are clamped and counted.
  float big[16] = {6000.0f, -3000.0f, 100.0f};
  EXPECT_EQ(nvfp4::quantize(big, 16, 1.0f, false, row, nullptr), 2);  // 6000 and -3000 beyond 6 · 448
  nvfp4::dequantize(row, 16, back);
  EXPECT_EQ(back[0], 6.0f * 448.0f);
  EXPECT_EQ(back[1], -6.0f * 448.0f);
}

TEST(Nvfp4, SpecRowsHoldCodesThenScalesAndRefuseWhatTheFormatCannotHold) {
  const KVCacheSpec s = nvfp4_spec(KVLayout::NHD);
  EXPECT_EQ(s.shape(), (std::vector<int64_t>{3, 2, 16, 2, 36}));  // 64 / 2 code bytes + 64 / 16 scales
  EXPECT_EQ(s.bytes(), 3 * 2 * 16 * 2 * 36);
  EXPECT_EQ(s.token_scale_bytes(), 0);
  EXPECT_FALSE(layout_fits_sizes(nvfp4_spec(KVLayout::HND_PAIRS)));
  EXPECT_TRUE(throws_error([] { KVCache c(nvfp4_spec(KVLayout::HND_PAIRS)); }, {"layout=HND_PAIRS", "NHD or HND for kv_cache_dtype nvfp4"}));
  EXPECT_TRUE(throws_error([] { KVCache c(nvfp4_spec(KVLayout::HND, 40)); }, {"head_size=40", "a multiple of 16"}));
  KVCacheSpec v = nvfp4_spec(KVLayout::HND, 64, KVCacheDType::nvfp4_4over6);
  v.head_size_v = 24;
  EXPECT_TRUE(throws_error([&] { KVCache c(v); }, {"head_size_v=24", "a multiple of 16 for kv_cache_dtype nvfp4_4over6"}));
  KVCacheSpec fp8 = nvfp4_spec();
  fp8.dtype = DType::fp8_e4m3;
  EXPECT_TRUE(throws_error([&] { KVCache c(fp8); }, {"cache dtype=fp8_e4m3", "int8 (bytes of codes and block scales)"}));
  // A backend keeping HND_PAIRS for byte caches (cpu_flash's rule: int8 storage) gives nvfp4 HND rows.
  BackendDescriptor d;
  d.kv_layout = KVLayout::HND_PAIRS;
  d.kv_layout_rule = KVLayoutRule{.q_dtypes = {DType::bfloat16}, .storage_dtypes = {DType::int8}, .otherwise = KVLayout::HND, .cpu_features = {}};
  LayerConfig cfg;
  cfg.num_heads = 8, cfg.num_kv_heads = 2, cfg.head_size = 128, cfg.dtype = DType::bfloat16;
  cfg.kv_cache_dtype = KVCacheDType::int8_per_token_head;
  EXPECT_EQ(d.cache_spec(cfg, 4, 64).layout, KVLayout::HND_PAIRS);
  cfg.kv_cache_dtype = KVCacheDType::nvfp4;
  EXPECT_EQ(d.cache_spec(cfg, 4, 64).layout, KVLayout::HND);
}

// write_kv stores what the quantizer gives for every written dtype, in NHD and HND, with a global
// scale; a NaN poison fill reads NaN; fill with a value reads it back (rounded to e4m3).
TEST(Nvfp4, WriteStoresEachVectorsQuantizedRow) {
  for (KVCacheDType kd : {KVCacheDType::nvfp4, KVCacheDType::nvfp4_4over6})
    for (KVLayout layout : {KVLayout::NHD, KVLayout::HND})
      for (DType io : {DType::float32, DType::float16, DType::bfloat16}) {
        const KVCacheSpec spec = nvfp4_spec(layout, 128, kd);
        KVCache cache(spec);
        cache.set_scales({0.25f}, {4.0f});
        cache.fill(std::numeric_limits<float>::quiet_NaN());
        const int n = 5, H = spec.num_kv_heads, d = spec.head_size;
        std::mt19937 rng(uint32_t(int(layout) * 7 + int(io) + 31 * int(kd)));
        std::normal_distribution<float> n01;
        Buffer k(io, {n, H, d}), v(io, {n, H, d});
        for (int64_t i = 0; i < int64_t(n) * H * d; ++i) store_from_float(k.data(), io, i, n01(rng)), store_from_float(v.data(), io, i, 8.0f * n01(rng));
        BatchMetadata md = BatchMetadata::build({SequenceSpec{14, n, {1, 2}}}, spec.block_size, spec.num_blocks, true);
        cache.write(TensorView::contiguous(k.data(), io, {n, H, d}), TensorView::contiguous(v.data(), io, {n, H, d}), md);
        EXPECT_EQ(cache.saturated_values(), 0);
        const PagedKV pv = cache.view();
        for (int t = 0; t < n; ++t)
          for (int h = 0; h < H; ++h)
            for (bool is_v : {false, true}) {
              const Buffer& src = is_v ? v : k;
              const float g = is_v ? 4.0f : 0.25f;
              std::vector<float> x(static_cast<std::size_t>(d));
              for (int i = 0; i < d; ++i) x[std::size_t(i)] = load_as_float(src.data(), io, (int64_t(t) * H + h) * d + i);
              std::vector<uint8_t> want(static_cast<std::size_t>(nvfp4::row_bytes(d))), got(want.size());
              nvfp4::quantize(x.data(), d, 1.0f / g, kd == KVCacheDType::nvfp4_4over6, want.data(), nullptr);
              const int64_t blk = md.slot_mapping[std::size_t(t)] / spec.block_size, off = md.slot_mapping[std::size_t(t)] % spec.block_size;
              gather_kv_vector(pv, blk, off, h, is_v, d, got.data());
              ASSERT_EQ(got, want) << to_string(kd) << " " << to_string(layout) << " " << to_string(io) << " t" << t << " h" << h << " v" << is_v;
              std::vector<float> back(static_cast<std::size_t>(d));
              nvfp4::dequantize(got.data(), d, back.data());
              double err = 0, norm = 0;
              for (int i = 0; i < d; ++i) err += std::pow(back[std::size_t(i)] * g - x[std::size_t(i)], 2), norm += std::pow(x[std::size_t(i)], 2);
              EXPECT_LT(std::sqrt(err / norm), 0.2) << "a 4-bit vector reads back within its quantization error";
            }
        // A slot nothing wrote still reads the NaN poison.
        std::vector<uint8_t> row(static_cast<std::size_t>(nvfp4::row_bytes(d)));
        std::vector<float> back(static_cast<std::size_t>(d));
        gather_kv_vector(pv, 0, 0, 0, false, d, row.data());
        nvfp4::dequantize(row.data(), d, back.data());
        for (float b : back) ASSERT_TRUE(std::isnan(b));
      }
  KVCache c(nvfp4_spec());
  c.fill(0.75f);
  const PagedKV pv = c.view();
  std::vector<uint8_t> row(static_cast<std::size_t>(nvfp4::row_bytes(64)));
  float back[64];
  gather_kv_vector(pv, 2, 15, 1, true, 64, row.data());
  nvfp4::dequantize(row.data(), 64, back);
  for (float b : back) EXPECT_EQ(b, 0.75f);
}

}  // namespace
}  // namespace attn
