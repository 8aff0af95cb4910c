// KVCache::write against a scalar oracle: every layout (NHD, HND, HND_PAIRS, MLA), storage dtype
// (f32 / f16 / bf16 / fp8 with per-tensor and per-head scales) and source dtype, on random slot
// mappings (runs that start and end inside 16-token groups, skipped tokens, blocks out of order,
// single decode tokens), strided sources and odd sizes. Bytes must equal the oracle's exactly,
// bytes of slots nobody wrote must keep their poison, and the fp8 count must match. Per-token-head
// caches (int8 / fp8 codes, a scale per slot and head): codes and scales equal the scalar
// quantizer's (token_head::quantize) bit for bit, whichever store build ran.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "attn/kv_cache.hpp"
#include "attn/numeric.hpp"
#include "attn/tensor.hpp"
#include "support/expect_error.hpp"
#include "support/test_support.hpp"

namespace {

using namespace attn;
using attn::test::throws_error;

struct Case {
  KVLayout layout;
  DType storage;
  DType source;
  int32_t block_size, heads, head_size, head_size_v;
  bool per_head;
  int32_t num_blocks = 6;
  bool token = false;  // a per-token-head cache (storage int8 or fp8_e4m3)
};

// Random source values: normal, with some large, tiny and non-finite values for fp8 ranges.
float draw(std::mt19937_64& rng, bool extremes) {
  std::normal_distribution<float> normal(0.0f, 2.0f);
  float x = normal(rng);
  if (!extremes) return x;
  switch (rng() % 64) {
    case 0: return 1e6f;
    case 1: return -INFINITY;
    case 2: return NAN;
    case 3: return 1e-6f;
    default: return x;
  }
}

void run_case(const Case& c, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " layout " << to_string(c.layout) << " storage "
                                    << to_string(c.storage) << " source " << to_string(c.source) << " bs " << c.block_size
                                    << " heads " << c.heads << " hs " << c.head_size << "/" << c.head_size_v
                                    << " blocks " << c.num_blocks);
  std::mt19937_64 rng(seed);
  const bool mla = c.layout == KVLayout::MLA;
  KVCacheSpec spec;
  spec.layout = c.layout;
  spec.dtype = c.storage;
  spec.kv_cache_dtype = c.token ? (c.storage == DType::int8 ? KVCacheDType::int8_per_token_head : KVCacheDType::fp8_per_token_head)
                        : c.storage == DType::fp8_e4m3 ? KVCacheDType::fp8_e4m3
                        : c.storage == DType::fp8_e5m2 ? KVCacheDType::fp8_e5m2 : KVCacheDType::auto_;
  spec.block_size = c.block_size;
  spec.num_kv_heads = mla ? 1 : c.heads;
  spec.head_size = c.head_size;
  spec.head_size_v = c.head_size_v;
  spec.per_head_scales = c.per_head && !c.token;
  spec.num_blocks = c.num_blocks;
  KVCache cache(spec);
  const bool fp8 = (c.storage == DType::fp8_e4m3 || c.storage == DType::fp8_e5m2) && !c.token;
  const int64_t scale_slots = int64_t(spec.num_blocks) * spec.block_size * spec.num_kv_heads;
  if (c.token)  // poison the scales too: a slot nobody wrote keeps its value
    for (float* sc : {cache.k_token_scales(), cache.v_token_scales()}) std::fill(sc, sc + scale_slots, -3.5f);
  if (fp8) {
    std::vector<float> ks, vs;
    for (int h = 0; h < (c.per_head ? spec.num_kv_heads : 1); ++h) ks.push_back(0.5f + h), vs.push_back(0.25f + 2 * h);
    cache.set_scales(ks, vs);
  }
  std::memset(cache.data(), 0xA5, cache.bytes());
  const std::vector<uint8_t> poison(static_cast<uint8_t*>(cache.data()), static_cast<uint8_t*>(cache.data()) + cache.bytes());

  // Slots: a shuffled block order, tokens written in runs of random length with gaps and skips.
  const int64_t num_slots = int64_t(spec.num_blocks) * spec.block_size;
  std::vector<int64_t> order(std::size_t(spec.num_blocks));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int64_t> slots;
  for (int64_t pos = int64_t(rng() % 5); pos < num_slots;) {
    const int64_t len = 1 + int64_t(rng() % (rng() % 2 ? 3 : 70));
    for (int64_t i = 0; i < len && pos < num_slots; ++i, ++pos)
      slots.push_back(rng() % 23 == 0 ? -1 : order[std::size_t(pos / spec.block_size)] * spec.block_size + pos % spec.block_size);
    pos += int64_t(rng() % 4);
  }
  std::shuffle(slots.begin(), slots.begin() + std::min<std::ptrdiff_t>(3, std::ptrdiff_t(slots.size())), rng);
  const int64_t n = int64_t(slots.size());
  BatchMetadata md;
  md.num_tokens = n;
  md.block_size = spec.block_size;
  md.slot_mapping = slots;

  // Sources with padded token and head strides, in their dtype.
  const int32_t kv_heads = spec.num_kv_heads, hs = c.head_size, hv = spec.v_width();
  const std::size_t ses = dtype_size(c.source);
  const int64_t head_stride = std::max(hs, hv) + 3, token_stride = kv_heads * head_stride + 5;
  std::vector<char> kbuf(std::size_t(n * token_stride) * ses + 64), vbuf(kbuf.size());
  const bool extremes = (fp8 || c.token) && seed % 2;
  for (int64_t i = 0; i < n * token_stride; ++i) {
    store_from_float(kbuf.data(), c.source, i, draw(rng, extremes));
    store_from_float(vbuf.data(), c.source, i, draw(rng, extremes));
  }
  auto view = [&](std::vector<char>& buf, int32_t width) {
    TensorView t;
    t.data = buf.data();
    t.dtype = c.source;
    t.ndim = 3;
    t.shape = {n, kv_heads, width};
    t.strides = {token_stride, head_stride, 1};
    return t;
  };
  cache.write(view(kbuf, hs), view(vbuf, hv), md);

  // The oracle: the scalar conversion of every value, at kv_element_offset.
  std::vector<uint8_t> want = poison;
  const PagedKV pv = cache.view();
  const float max = c.storage == DType::fp8_e4m3 ? kFp8E4M3Max : kFp8E5M2Max;
  int64_t bad = 0;
  std::vector<float> want_scales[2] = {std::vector<float>(std::size_t(scale_slots), -3.5f), std::vector<float>(std::size_t(scale_slots), -3.5f)};
  for (int64_t t = 0; t < n; ++t) {
    if (slots[std::size_t(t)] < 0) continue;
    const int64_t b = slots[std::size_t(t)] / spec.block_size, off = slots[std::size_t(t)] % spec.block_size;
    for (int32_t h = 0; h < kv_heads; ++h)
      for (int is_v = 0; is_v < (mla ? 1 : 2); ++is_v) {
        const int32_t width = is_v ? hv : hs;
        if (c.token) {
          std::vector<float> row(static_cast<std::size_t>(width));
          std::vector<uint8_t> codes(static_cast<std::size_t>(width));
          for (int32_t d = 0; d < width; ++d)
            row[std::size_t(d)] = load_as_float(is_v ? vbuf.data() : kbuf.data(), c.source, t * token_stride + h * head_stride + d);
          want_scales[is_v][std::size_t(token_scale_index(pv, b, off, h))] = token_head::quantize(row.data(), width, c.storage, codes.data(), &bad);
          for (int32_t d = 0; d < width; ++d) want[std::size_t(kv_element_offset(pv, b, off, h, d, is_v))] = codes[std::size_t(d)];
          continue;
        }
        const float inv = 1.0f / (is_v ? cache.v_scales() : cache.k_scales())[std::size_t(h)];
        for (int32_t d = 0; d < width; ++d) {
          float x = load_as_float(is_v ? vbuf.data() : kbuf.data(), c.source, t * token_stride + h * head_stride + d);
          if (fp8) {
            x *= inv;
            bad += !(std::fabs(x) <= max);
          }
          store_from_float(want.data(), c.storage, kv_element_offset(pv, b, off, h, d, is_v), x);
        }
      }
  }
  const auto* got = static_cast<const uint8_t*>(cache.data());
  std::size_t mismatches = 0, first = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i] && mismatches++ == 0) first = i;
  EXPECT_EQ(mismatches, 0u) << "first differing byte " << first << " of " << want.size()
                            << (want[first] == poison[first] ? " (should be untouched)" : "");
  EXPECT_EQ(cache.saturated_values(), bad);
  if (c.token)
    for (int is_v = 0; is_v < 2; ++is_v) {
      const float* got_s = is_v ? cache.v_token_scales() : cache.k_token_scales();
      std::size_t wrong = 0, at = 0;
      for (std::size_t i = 0; i < want_scales[is_v].size(); ++i) {
        const float w = want_scales[is_v][i], g = got_s[i];
        if (!(w == g || (std::isnan(w) && std::isnan(g))) && wrong++ == 0) at = i;
      }
      EXPECT_EQ(wrong, 0u) << (is_v ? "V" : "K") << " scale " << at << ": " << got_s[at] << " want " << want_scales[is_v][at];
    }
}

TEST(KVStore, MatchesScalarOracleOnEveryLayoutAndDtype) {
  const uint64_t base = attn::test::fresh_seed();
  uint64_t seed = base;
  const DType storages[] = {DType::float32, DType::float16, DType::bfloat16, DType::fp8_e4m3, DType::fp8_e5m2};
  const DType sources[] = {DType::float32, DType::float16, DType::bfloat16};
  struct Shape { int32_t bs, heads, hs, hv; };
  const Shape pair_shapes[] = {{16, 2, 64, 64}, {64, 3, 128, 128}, {32, 1, 80, 34}, {16, 2, 2, 2}, {48, 2, 130, 96}, {16, 1, 576, 512}};
  const Shape row_shapes[] = {{16, 2, 64, 64}, {5, 3, 33, 7}, {64, 1, 128, 96}};
  for (DType st : storages)
    for (DType src : sources) {
      for (const Shape& s : pair_shapes) {
        run_case({KVLayout::HND_PAIRS, st, src, s.bs, s.heads, s.hs, s.hv, seed % 2 == 0}, seed);
        ++seed;  // after the call: an argument list does not order `seed % 2` and `seed++`
      }
      for (KVLayout l : {KVLayout::NHD, KVLayout::HND})
        for (const Shape& s : row_shapes) {
          run_case({l, st, src, s.bs, s.heads, s.hs, s.hv, seed % 2 == 1}, seed);
          ++seed;
        }
      run_case({KVLayout::MLA, st, src, 16, 1, 576, 512, false}, seed++);
    }
  // Per-token-head caches: int8 and fp8 codes, every source dtype, pairs and rows.
  for (DType st : {DType::int8, DType::fp8_e4m3})
    for (DType src : sources) {
      for (const Shape& s : pair_shapes) {
        run_case({KVLayout::HND_PAIRS, st, src, s.bs, s.heads, s.hs, s.hv, false, 6, true}, seed);
        ++seed;
      }
      for (KVLayout l : {KVLayout::NHD, KVLayout::HND})
        for (const Shape& s : row_shapes) {
          run_case({l, st, src, s.bs, s.heads, s.hs, s.hv, false, 6, true}, seed);
          ++seed;
        }
    }
}

// The quantizer's edge cases: an all-zero vector (the 1e-6 scale floor, codes 0), tiny values
// (denormals: the floor keeps 1 / scale finite), the absmax landing exactly on the top code,
// -128's never being produced, and a vector with a NaN or an infinity (NaN scale, zero codes,
// counted).
TEST(KVStore, TokenHeadQuantizerEdgeCases) {
  for (DType st : {DType::int8, DType::fp8_e4m3}) {
    SCOPED_TRACE(to_string(st));
    const float top = token_head::max_code(st);
    std::vector<uint8_t> codes(8);
    int64_t bad = 0;
    const float zeros[8] = {};
    EXPECT_EQ(token_head::quantize(zeros, 8, st, codes.data(), &bad), token_head::kMinScale);
    for (uint8_t cde : codes) EXPECT_EQ(cde, 0);
    const float tiny[8] = {1e-40f, -1e-40f, 0, 0, 0, 0, 0, 0};
    EXPECT_EQ(token_head::quantize(tiny, 8, st, codes.data(), &bad), token_head::kMinScale);
    EXPECT_EQ(load_as_float(codes.data(), st, 0), 0.0f);
    const float row[8] = {-3.0f, 1.5f, 0.25f, 3.0f, -0.001f, 2.0f, -2.99f, 0.0f};
    const float sc = token_head::quantize(row, 8, st, codes.data(), &bad);
    EXPECT_EQ(sc, 3.0f / top);
    EXPECT_EQ(load_as_float(codes.data(), st, 0), -top);
    EXPECT_EQ(load_as_float(codes.data(), st, 3), top);
    for (int i = 0; i < 8; ++i) EXPECT_NEAR(load_as_float(codes.data(), st, i) * sc, row[i], 0.5 * sc * (st == DType::int8 ? 1.0 : 32.0));
    EXPECT_EQ(bad, 0);
    const float nonfinite[8] = {1.0f, NAN, 2.0f, INFINITY, 0, 0, 0, 0};
    EXPECT_TRUE(std::isnan(token_head::quantize(nonfinite, 8, st, codes.data(), &bad)));
    EXPECT_EQ(bad, 2);
    for (uint8_t cde : codes) EXPECT_EQ(cde, 0);
  }
  std::vector<uint8_t> codes(2);
  const float halves[2] = {-127.0f, 0.5f};  // scale 1: 0.5 rounds away from zero, to 1
  EXPECT_EQ(token_head::quantize(halves, 2, DType::int8, codes.data(), nullptr), 1.0f);
  EXPECT_EQ(int8_t(codes[0]), -127);
  EXPECT_EQ(int8_t(codes[1]), 1);
  EXPECT_TRUE(throws_error([] { token_head::max_code(DType::bfloat16); }, {"int8 or fp8_e4m3"}));
}

// Writes of 4 MiB and more take the bulk path (whole lines streamed past the caches, then fenced):
// a Llama-3.1-8B-shaped layer (8 KV heads x 128) over 96 blocks, ~1400 tokens, K and V.
TEST(KVStore, BulkWritesMatchTheOracle) {
  uint64_t seed = attn::test::fresh_seed();
  for (KVLayout l : {KVLayout::HND_PAIRS, KVLayout::HND, KVLayout::NHD})
    for (DType src : {DType::bfloat16, DType::float32})
      run_case({l, DType::bfloat16, src, 16, 8, 128, 128, false, 96}, seed++);
  run_case({KVLayout::HND_PAIRS, DType::float16, DType::float16, 32, 8, 128, 128, false, 48}, seed++);
  run_case({KVLayout::HND, DType::float32, DType::float32, 16, 8, 128, 128, false, 48}, seed++);
}

}  // namespace

namespace {

// The vector e4m3 encode of the store against the scalar one on every code's value, every midpoint
// between neighbouring codes and the floats beside it, both signs, the saturation band, infinities,
// NaN and fp32 denormals: one K row per sign through a per-tensor fp8 cache with scale 1.
TEST(KVStore, E4m3EncodeMatchesTheScalarOneEverywhere) {
  std::vector<float> values;
  for (int c = 0; c < 0x7e; ++c) {
    const float a = fp8_e4m3_to_f32(uint8_t(c)), b = fp8_e4m3_to_f32(uint8_t(c + 1)), mid = 0.5f * (a + b);
    for (float x : {a, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) values.push_back(x);
  }
  for (float x : {448.0f, 449.0f, 463.99f, 464.0f, 470.0f, 1e9f, 3e38f, INFINITY, NAN, 1e-40f, 1e-45f, 0.0009765625f, 0.0f})
    values.push_back(x);
  const int32_t n = int32_t(values.size());
  for (float sign : {1.0f, -1.0f}) {
    std::vector<float> row(values);
    for (float& x : row) x *= sign;
    KVCacheSpec spec;
    spec.num_blocks = 1, spec.block_size = 1, spec.num_kv_heads = 1, spec.head_size = n, spec.head_size_v = 1;
    spec.dtype = DType::fp8_e4m3, spec.kv_cache_dtype = KVCacheDType::fp8_e4m3, spec.layout = KVLayout::HND;
    KVCache cache(spec);
    BatchMetadata md;
    md.num_tokens = 1, md.block_size = 1, md.slot_mapping = {0};
    float v = 0.0f;
    cache.write(TensorView::contiguous(row.data(), DType::float32, {1, 1, n}), TensorView::contiguous(&v, DType::float32, {1, 1, 1}), md);
    const auto* got = static_cast<const uint8_t*>(cache.data());
    for (int32_t i = 0; i < n; ++i)
      ASSERT_EQ(int(got[i]), int(f32_to_fp8_e4m3(row[std::size_t(i)]))) << "value " << row[std::size_t(i)] << " at " << i;
  }
}

}  // namespace
