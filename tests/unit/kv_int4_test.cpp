// int4_per_token_head: the rotation, the quantizer's edge cases, the spec and what write_kv stores.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "attn/kv_cache.hpp"
#include "attn/tensor.hpp"
#include "support/expect_error.hpp"
#include "support/test_support.hpp"

namespace attn {
namespace {

using test::throws_error;

KVCacheSpec int4_spec(KVLayout layout = KVLayout::HND, int head = 64) {
  return test::byte_cache_spec(KVCacheDType::int4_per_token_head, layout, head);
}

TEST(Int4Head, SignsAreVllmsTorchBernoulliDraw) {
  // 2 * torch.bernoulli(torch.full((32,), 0.5), generator=torch.Generator().manual_seed(0x9E3779B9)) - 1
  const float want[32] = {1, -1, 1, 1, -1, -1, -1, -1, 1, -1, -1, 1, 1, -1, 1, -1,
                          1, 1, -1, -1, 1, 1, 1, -1, 1, -1, 1, -1, -1, 1, 1, -1};
  for (int i = 0; i < 32; ++i) EXPECT_EQ(int4_head::rht_sign(i), want[i]) << i;
}

TEST(Int4Head, RotationIsInvertedByUnrotate) {
  std::mt19937 rng(11);
  std::normal_distribution<float> n01;
  for (int n : {2, 16, 64, 128, 256}) {
    std::vector<float> x(static_cast<std::size_t>(n)), y;
    for (float& v : x) v = n01(rng);
    y = x;
    int4_head::rotate(y.data(), n);
    double norm_x = 0, norm_y = 0;
    for (int i = 0; i < n; ++i) norm_x += double(x[std::size_t(i)]) * x[std::size_t(i)], norm_y += double(y[std::size_t(i)]) * y[std::size_t(i)];
    EXPECT_NEAR(norm_y, n * norm_x, 1e-4 * n * norm_x) << n;  // H·H = n·I: the norm grows by sqrt(n)
    int4_head::unrotate(y.data(), n);
    for (int i = 0; i < n; ++i) EXPECT_NEAR(y[std::size_t(i)], x[std::size_t(i)], 1e-5f) << n << " " << i;
  }
}

TEST(Int4Head, QuantizerCodesScaleAndZeroPoint) {
  // min -1, max 2: scale 0.2, zero point round(5) = 5; codes round(y / 0.2 + 5).
  const float y[4] = {-1.0f, 2.0f, 0.0f, 0.31f};
  uint8_t codes[2];
  const float stored = int4_head::quantize(y, 4, codes, nullptr);
  EXPECT_EQ(int4_head::zero_point(stored), 5);
  EXPECT_NEAR(int4_head::scale_of(stored), 0.2f, 2e-6f);
  EXPECT_EQ(codes[0], uint8_t(0 | (15 << 4)));  // even dim low nibble
  EXPECT_EQ(codes[1], uint8_t(5 | (7 << 4)));   // 0.31 / 0.2 + 5 = 6.55 -> 7
  float back[4];
  int4_head::dequantize(codes, stored, 4, back);
  // The zero point takes the scale's low 4 mantissa bits: values read back within 15 ulps of it.
  EXPECT_NEAR(back[0], -1.0f, 1e-5f);
  EXPECT_NEAR(back[1], 2.0f, 1e-5f);
  EXPECT_EQ(back[2], 0.0f);
}

TEST(Int4Head, QuantizerEdgeCases) {
  uint8_t codes[4];
  const float zeros[8] = {};
  float stored = int4_head::quantize(zeros, 8, codes, nullptr);  // the 1e-6 floor; everything reads 0
  EXPECT_NEAR(int4_head::scale_of(stored), token_head::kMinScale, 2e-6f * token_head::kMinScale);
  float back[8];
  int4_head::dequantize(codes, stored, 8, back);
  for (float b : back) EXPECT_EQ(b, 0.0f);
  const float tiny[8] = {1e-40f, -1e-40f, 0, 0, 0, 0, 0, 0};  // denormals round to zero codes
  stored = int4_head::quantize(tiny, 8, codes, nullptr);
  int4_head::dequantize(codes, stored, 8, back);
  for (float b : back) EXPECT_LT(std::fabs(b), 1e-6f);
  int64_t bad = 0;
  const float nan[8] = {1, 2, std::numeric_limits<float>::quiet_NaN(), 0, std::numeric_limits<float>::infinity(), 0, 0, 0};
  stored = int4_head::quantize(nan, 8, codes, &bad);
  EXPECT_TRUE(std::isnan(stored));
  EXPECT_EQ(bad, 2);
  for (uint8_t c : codes) EXPECT_EQ(c, 0);
}

TEST(Int4Head, SpecHalvesTheRowAndRefusesWhatTheFormatCannotHold) {
  const KVCacheSpec s = int4_spec(KVLayout::NHD);
  EXPECT_EQ(s.shape(), (std::vector<int64_t>{3, 2, 16, 2, 32}));
  EXPECT_EQ(s.bytes(), 3 * 2 * 16 * 2 * 32);
  EXPECT_EQ(s.token_scale_bytes(), 2 * 3 * 16 * 2 * 4);
  EXPECT_TRUE(layout_fits_sizes(int4_spec(KVLayout::HND_PAIRS)));  // K bytes per dim pair, V bytes per key pair
  EXPECT_EQ(int4_spec(KVLayout::HND_PAIRS).shape(), (std::vector<int64_t>{3, 2, 2, 16, 32}));
  EXPECT_TRUE(throws_error([] { KVCache c(int4_spec(KVLayout::HND, 96)); }, {"head_size=96", "a power of two"}));
  KVCacheSpec bytes = int4_spec();
  bytes.dtype = DType::fp8_e4m3;
  EXPECT_TRUE(throws_error([&] { KVCache c(bytes); }, {"cache dtype=fp8_e4m3", "int8 for kv_cache_dtype int4_per_token_head"}));
}

// write_kv stores what rotate → round to the written dtype → quantize gives, in every layout it
// takes (HND_PAIRS: V bytes shared by two keys, written by one token each), for every written
// dtype; what it holds reads back close to what was written.
TEST(Int4Head, WriteStoresTheRotatedQuantizedVectors) {
  for (KVLayout layout : {KVLayout::NHD, KVLayout::HND, KVLayout::HND_PAIRS})
    for (DType io : {DType::float32, DType::float16, DType::bfloat16}) {
      const KVCacheSpec spec = int4_spec(layout, 128);
      KVCache cache(spec);
      cache.fill(std::numeric_limits<float>::quiet_NaN());
      const int n = 5, H = spec.num_kv_heads, d = spec.head_size;
      std::mt19937 rng(uint32_t(int(layout) * 7 + int(io)));
      std::normal_distribution<float> n01;
      Buffer k(io, {n, H, d}), v(io, {n, H, d});
      for (int64_t i = 0; i < int64_t(n) * H * d; ++i) store_from_float(k.data(), io, i, n01(rng)), store_from_float(v.data(), io, i, n01(rng));
      BatchMetadata md = BatchMetadata::build({SequenceSpec{14, n, {1, 2}}}, spec.block_size, spec.num_blocks, true);
      cache.write(TensorView::contiguous(k.data(), io, {n, H, d}), TensorView::contiguous(v.data(), io, {n, H, d}), md);
      const PagedKV pv = cache.view();
      for (int t = 0; t < n; ++t)
        for (int h = 0; h < H; ++h)
          for (bool is_v : {false, true}) {
            const Buffer& src = is_v ? v : k;
            std::vector<float> y(static_cast<std::size_t>(d)), x(static_cast<std::size_t>(d));
            for (int i = 0; i < d; ++i) x[std::size_t(i)] = y[std::size_t(i)] = load_as_float(src.data(), io, (int64_t(t) * H + h) * d + i);
            int4_head::rotate(y.data(), d);
            for (float& e : y) {
              char r[4];
              store_from_float(r, io, 0, e);
              e = load_as_float(r, io, 0);
            }
            std::vector<uint8_t> want(static_cast<std::size_t>(d / 2));
            const float want_scale = int4_head::quantize(y.data(), d, want.data(), nullptr);
            const int64_t slot = 14 + t, blk = md.slot_mapping[std::size_t(t)] / spec.block_size, off = slot % spec.block_size;
            std::vector<uint8_t> got_codes(static_cast<std::size_t>(d / 2));
            int4_head::load_vector(pv, blk, off, h, is_v, d, got_codes.data());
            const uint8_t* got = got_codes.data();
            const float got_scale = (is_v ? pv.v_token_scales : pv.k_token_scales)[token_scale_index(pv, blk, off, h)];
            ASSERT_EQ(std::memcmp(got, want.data(), want.size()), 0) << to_string(layout) << " " << to_string(io) << " t" << t << " h" << h << " v" << is_v;
            ASSERT_EQ(std::memcmp(&got_scale, &want_scale, 4), 0);
            std::vector<float> back(static_cast<std::size_t>(d));
            int4_head::dequantize(got, got_scale, d, back.data());
            int4_head::unrotate(back.data(), d);
            double err = 0, norm = 0;
            for (int i = 0; i < d; ++i) err += std::pow(back[std::size_t(i)] - x[std::size_t(i)], 2), norm += std::pow(x[std::size_t(i)], 2);
            EXPECT_LT(std::sqrt(err / norm), 0.2) << "a 4-bit vector reads back within its quantization error";
          }
    }
}

// HND_PAIRS placement: K byte j of key t at j · block_size + t, V dims of keys 2u, 2u + 1 in the
// low and high nibbles of one byte; writing one key leaves its pair partner's nibbles alone.
TEST(Int4Head, PairLayoutPlacesEachKeysCodes) {
  const KVCacheSpec spec = int4_spec(KVLayout::HND_PAIRS, 16);
  KVCache cache(spec);
  const PagedKV pv = cache.view();
  std::vector<uint8_t> a(8), b(8), got(8);
  for (int j = 0; j < 8; ++j) a[std::size_t(j)] = uint8_t(0x21 + j), b[std::size_t(j)] = uint8_t(0xA5 ^ j);
  for (bool is_v : {false, true}) {
    int4_head::store_vector(pv, 1, 6, 1, is_v, 16, a.data());
    int4_head::store_vector(pv, 1, 7, 1, is_v, 16, b.data());
    int4_head::load_vector(pv, 1, 6, 1, is_v, 16, got.data());
    EXPECT_EQ(got, a) << is_v;
    int4_head::load_vector(pv, 1, 7, 1, is_v, 16, got.data());
    EXPECT_EQ(got, b) << is_v;
  }
  const auto* run = static_cast<const uint8_t*>(pv.base) + pv.block_stride + pv.head_stride;
  EXPECT_EQ(run[3 * 16 + 6], a[3]);  // K: dim pair 3 of key 6
  const uint8_t* v = run + pv.v_offset + 3 * 2 * pv.token_stride;  // V: keys 6 and 7
  EXPECT_EQ(v[4], uint8_t((a[2] & 0xF) | ((b[2] & 0xF) << 4)));  // dim 4: low nibbles of byte 2
  EXPECT_EQ(v[5], uint8_t((a[2] >> 4) | (b[2] & 0xF0)));         // dim 5: high nibbles
}

}  // namespace
}  // namespace attn
