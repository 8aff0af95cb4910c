// turboquant_*: the presets' slot sizes, the Lloyd-Max centroids, packing, the quantizers' edge
// cases, the spec and what write_kv stores.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "attn/backend.hpp"
#include "attn/kv_cache.hpp"
#include "attn/numeric.hpp"
#include "attn/tensor.hpp"
#include "support/expect_error.hpp"
#include "support/test_support.hpp"

namespace attn {
namespace {

using test::throws_error;
using K = KVCacheDType;

KVCacheSpec tq_spec(K k, KVLayout layout = KVLayout::HND, int head = 64) { return test::byte_cache_spec(k, layout, head); }

TEST(TurboQuant, PresetsAndSlotSizesAreVllms) {
  // TurboQuantConfig: key_packed_size, value_packed_size, slot_size_aligned (head_dim 128).
  EXPECT_EQ(turboquant::slot_bytes(turboquant::format_of(K::turboquant_k8v4), 128), 128 + 68);
  EXPECT_EQ(turboquant::slot_bytes(turboquant::format_of(K::turboquant_4bit_nc), 128), 66 + 68);
  EXPECT_EQ(turboquant::slot_bytes(turboquant::format_of(K::turboquant_k3v4_nc), 128), 50 + 68);
  EXPECT_EQ(turboquant::slot_bytes(turboquant::format_of(K::turboquant_3bit_nc), 128), 50 + 52);
  EXPECT_EQ(turboquant::slot_bytes(turboquant::format_of(K::turboquant_3bit_nc), 8), 12);  // (3 + 2) + (3 + 4), already even
  EXPECT_EQ(turboquant::slot_bytes(turboquant::format_of(K::turboquant_k8v4), 6), 14);     // 6 + (3 + 4) = 13, rounded up
  EXPECT_TRUE(throws_error([] { turboquant::format_of(K::nvfp4); }, {"kv_cache_dtype=nvfp4", "a turboquant preset"}));
}

TEST(TurboQuant, CentroidsAreTheGaussianLloydMaxLevels) {
  // Lloyd-Max levels of a standard normal (8 and 16 levels), scaled by 1 / sqrt(d).
  const double l3[4] = {0.2451, 0.7560, 1.3440, 2.1520};
  const double l4[8] = {0.1284, 0.3881, 0.6568, 0.9424, 1.2562, 1.6181, 2.0690, 2.7326};
  for (int d : {64, 128}) {
    const double s = 1.0 / std::sqrt(double(d));
    const float* c3 = turboquant::centroids(d, 3);
    const float* c4 = turboquant::centroids(d, 4);
    for (int i = 0; i < 4; ++i) {
      EXPECT_NEAR(c3[4 + i], l3[i] * s, 2e-3 * s) << d << " " << i;
      EXPECT_EQ(c3[3 - i], -c3[4 + i]);
    }
    for (int i = 0; i < 8; ++i) EXPECT_NEAR(c4[8 + i], l4[i] * s, 2e-3 * s) << d << " " << i;
    const float* m = turboquant::midpoints(d, 4);
    for (int i = 0; i < 15; ++i) EXPECT_EQ(m[i], (c4[i] + c4[i + 1]) / 2.0f);
  }
}

TEST(TurboQuant, KeysRoundTripThroughTheRotationAndTheCentroids) {
  std::mt19937 rng(5);
  std::normal_distribution<float> n01;
  for (K k : {K::turboquant_4bit_nc, K::turboquant_k3v4_nc, K::turboquant_k8v4}) {
    const turboquant::Format f = turboquant::format_of(k);
    const int d = 128;
    std::vector<float> x(d), back(d);
    for (float& v : x) v = 3.0f * n01(rng);
    std::vector<uint8_t> slot(std::size_t(turboquant::slot_bytes(f, d)));
    int64_t bad = 0;
    turboquant::quantize_key(x.data(), d, f, slot.data(), &bad);
    EXPECT_EQ(bad, 0);
    turboquant::dequantize_key(slot.data(), d, f, back.data());
    double norm_x = 0, norm_b = 0;
    for (int i = 0; i < d; ++i) norm_x += double(x[i]) * x[i], norm_b += double(back[i]) * back[i];
    if (!f.key_fp8()) {
      // Norm correction: the read vector has exactly the stored (fp16) norm.
      EXPECT_NEAR(std::sqrt(norm_b), f16_to_f32(f32_to_f16(float(std::sqrt(norm_x)))), 1e-3 * std::sqrt(norm_x)) << to_string(k);
      turboquant::rotate(back.data(), d);  // back into the model's space
    }
    double err = 0;
    for (int i = 0; i < d; ++i) err += std::pow(back[i] - x[i], 2);
    EXPECT_LT(std::sqrt(err / norm_x), f.key_fp8() ? 0.05 : f.key_bits == 4 ? 0.15 : 0.25) << to_string(k);
  }
}

TEST(TurboQuant, ValuesAreUniformBetweenTheirMinAndMax) {
  // 3 bits: 8 levels over [-1, 6], scale 1; codes at bit 3i, eight per 3 bytes.
  const turboquant::Format f = turboquant::format_of(K::turboquant_3bit_nc);
  float x[16] = {-1, 6, 0, 1.4f, 2.5f, 3, 4, 5, -1, -1, -1, -1, -1, -1, -1, 0.49f};
  uint8_t v[turboquant::value_bytes(f, 16)];  // 6 code bytes, fp16 scale, fp16 min
  turboquant::quantize_value(x, 16, f, v, nullptr);
  const int want[8] = {0, 7, 1, 2, 4, 4, 5, 6};  // trunc((x + 1) / 1 + 0.5)
  uint32_t first = uint32_t(v[0]) | uint32_t(v[1]) << 8 | uint32_t(v[2]) << 16;
  for (int i = 0; i < 8; ++i) EXPECT_EQ(int((first >> (3 * i)) & 7), want[i]) << i;
  EXPECT_EQ(f16_to_f32(uint16_t(v[6] | v[7] << 8)), 1.0f);
  EXPECT_EQ(f16_to_f32(uint16_t(v[8] | v[9] << 8)), -1.0f);
  float back[16];
  turboquant::dequantize_value(v, 16, f, back);
  EXPECT_EQ(back[1], 6.0f);
  EXPECT_EQ(back[15], 0.0f);  // 0.49 + 1 + 0.5 = 1.99 -> code 1
  // A constant vector: the 1e-8 scale floor (0 in fp16), every value reads the minimum.
  float c[16];
  for (float& e : c) e = 0.75f;
  turboquant::quantize_value(c, 16, f, v, nullptr);
  turboquant::dequantize_value(v, 16, f, back);
  for (float b : back) EXPECT_EQ(b, 0.75f);
}

TEST(TurboQuant, NonFiniteVectorsReadNan) {
  for (K k : {K::turboquant_4bit_nc, K::turboquant_3bit_nc, K::turboquant_k8v4}) {
    const turboquant::Format f = turboquant::format_of(k);
    std::vector<float> x(32, 1.0f), back(32);
    x[7] = std::numeric_limits<float>::infinity();
    std::vector<uint8_t> slot(std::size_t(turboquant::slot_bytes(f, 32)));
    int64_t bad = 0;
    turboquant::quantize_key(x.data(), 32, f, slot.data(), &bad);
    turboquant::quantize_value(x.data(), 32, f, slot.data() + turboquant::key_bytes(f, 32), &bad);
    EXPECT_EQ(bad, 2) << to_string(k);  // the fp8 key saturates the infinity (counted), the others read NaN
    turboquant::dequantize_value(slot.data() + turboquant::key_bytes(f, 32), 32, f, back.data());
    for (float b : back) EXPECT_TRUE(std::isnan(b));
    turboquant::dequantize_key(slot.data(), 32, f, back.data());
    if (!f.key_fp8()) {
      for (float b : back) EXPECT_TRUE(std::isnan(b));
    }
  }
}

TEST(TurboQuant, SpecIsVllmsSlotShapeAndRefusesWhatTheFormatCannotHold) {
  EXPECT_EQ(tq_spec(K::turboquant_4bit_nc).shape(), (std::vector<int64_t>{3, 2, 16, 70}));  // [blocks, heads, block, slot]
  EXPECT_EQ(tq_spec(K::turboquant_4bit_nc, KVLayout::NHD).shape(), (std::vector<int64_t>{3, 16, 2, 70}));
  EXPECT_EQ(tq_spec(K::turboquant_4bit_nc).bytes(), 3 * 2 * 16 * 70);
  const PagedKV pv = KVCache(tq_spec(K::turboquant_4bit_nc)).view();
  EXPECT_EQ(pv.v_offset, 34);  // V right after K's 32 index bytes and fp16 norm, in the same slot
  EXPECT_EQ(pv.token_stride, 70);
  EXPECT_EQ(pv.head_stride, 16 * 70);
  EXPECT_TRUE(throws_error([] { KVCache c(tq_spec(K::turboquant_4bit_nc, KVLayout::HND, 96)); }, {"head_size=96", "a power of two >= 8"}));
  EXPECT_NO_THROW(KVCache(tq_spec(K::turboquant_k8v4, KVLayout::HND, 96)));  // fp8 keys: no rotation
  KVCacheSpec v = tq_spec(K::turboquant_k8v4);
  v.head_size_v = 32;
  EXPECT_TRUE(throws_error([&] { KVCache c(v); }, {"head_size_v=32", "K and V share a slot"}));
  EXPECT_TRUE(throws_error([] { KVCache c(tq_spec(K::turboquant_3bit_nc, KVLayout::HND_PAIRS)); }, {"layout=HND_PAIRS", "NHD or HND"}));
  KVCacheSpec heads = tq_spec(K::turboquant_4bit_nc);
  heads.per_head_scales = true;
  EXPECT_TRUE(throws_error([&] { KVCache c(heads); }, {"per_head_scales=true", "each slot carries its own norm and scales"}));
  // The one statement of these rules, which the selector gives as reasons too: every rule broken, in order.
  const std::vector<KvFormatUnmet> broken = kv_format_unmet(K::turboquant_4bit_nc, 96, 64, true);
  ASSERT_EQ(broken.size(), 3u);
  EXPECT_EQ(broken[0].argument, "head_size");
  EXPECT_EQ(broken[1].argument, "head_size_v");
  EXPECT_EQ(broken[2].argument, "per_head_scales");
  EXPECT_TRUE(kv_format_unmet(K::turboquant_4bit_nc, 128, 128, false).empty());
  KVCache c(tq_spec(K::turboquant_3bit_nc));
  EXPECT_TRUE(throws_error([&] { c.set_scales({2.0f}, {2.0f}); }, {"kv_cache_dtype=turboquant_3bit_nc", "per-tensor or per-head"}));
  BackendDescriptor d;
  d.kv_layout = KVLayout::HND_PAIRS;
  d.kv_layout_rule = KVLayoutRule{.q_dtypes = {}, .storage_dtypes = {DType::int8}, .otherwise = KVLayout::HND, .cpu_features = {}};
  LayerConfig cfg;
  cfg.num_heads = 8, cfg.num_kv_heads = 2, cfg.head_size = 128, cfg.dtype = DType::bfloat16;
  cfg.kv_cache_dtype = K::turboquant_k3v4_nc;
  EXPECT_EQ(d.cache_spec(cfg, 4, 64).layout, KVLayout::HND);
}

// write_kv stores each token's K and V parts where the quantizers put them, in both layouts, for
// every written dtype; a NaN poison fill reads NaN.
TEST(TurboQuant, WriteStoresEachTokensSlot) {
  for (K k : {K::turboquant_k8v4, K::turboquant_4bit_nc, K::turboquant_k3v4_nc, K::turboquant_3bit_nc})
    for (KVLayout layout : {KVLayout::NHD, KVLayout::HND})
      for (DType io : {DType::float32, DType::bfloat16}) {
        const KVCacheSpec spec = tq_spec(k, layout, 128);
        const turboquant::Format f = turboquant::format_of(k);
        KVCache cache(spec);
        cache.fill(std::numeric_limits<float>::quiet_NaN());
        const int n = 5, H = spec.num_kv_heads, d = spec.head_size;
        std::mt19937 rng(uint32_t(int(layout) * 7 + int(io) + 31 * int(k)));
        std::normal_distribution<float> n01;
        Buffer kb(io, {n, H, d}), vb(io, {n, H, d});
        for (int64_t i = 0; i < int64_t(n) * H * d; ++i) store_from_float(kb.data(), io, i, n01(rng)), store_from_float(vb.data(), io, i, n01(rng));
        BatchMetadata md = BatchMetadata::build({SequenceSpec{14, n, {1, 2}}}, spec.block_size, spec.num_blocks, true);
        cache.write(TensorView::contiguous(kb.data(), io, {n, H, d}), TensorView::contiguous(vb.data(), io, {n, H, d}), md);
        EXPECT_EQ(cache.saturated_values(), 0);
        const PagedKV pv = cache.view();
        for (int t = 0; t < n; ++t)
          for (int h = 0; h < H; ++h) {
            std::vector<float> x(d), y(d);
            for (int i = 0; i < d; ++i)
              x[i] = load_as_float(kb.data(), io, (int64_t(t) * H + h) * d + i), y[i] = load_as_float(vb.data(), io, (int64_t(t) * H + h) * d + i);
            std::vector<uint8_t> want(std::size_t(turboquant::slot_bytes(f, d)), 0);
            turboquant::quantize_key(x.data(), d, f, want.data(), nullptr);
            turboquant::quantize_value(y.data(), d, f, want.data() + pv.v_offset, nullptr);
            const int64_t blk = md.slot_mapping[std::size_t(t)] / spec.block_size, off = md.slot_mapping[std::size_t(t)] % spec.block_size;
            const uint8_t* got = static_cast<const uint8_t*>(pv.base) + kv_element_offset(pv, blk, off, h, 0, false);
            ASSERT_EQ(std::memcmp(got, want.data(), std::size_t(turboquant::key_bytes(f, d) + turboquant::value_bytes(f, d))), 0)
                << to_string(k) << " " << to_string(layout) << " " << to_string(io) << " t" << t << " h" << h;
          }
        std::vector<float> back(d);
        const uint8_t* poison = static_cast<const uint8_t*>(pv.base);  // block 0, slot 0: not written
        turboquant::dequantize_value(poison + pv.v_offset, d, f, back.data());
        for (float b : back) ASSERT_TRUE(std::isnan(b));
      }
}

}  // namespace
}  // namespace attn
