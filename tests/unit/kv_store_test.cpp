// KVCache::write against a scalar oracle: every layout (NHD, HND, HND_PAIRS, MLA), storage dtype
// (f32 / f16 / bf16 / fp8 with per-tensor and per-head scales) and source dtype, on random slot
// mappings (runs that start and end inside 16-token groups, skipped tokens, blocks out of order,
// single decode tokens), strided sources and odd sizes. Bytes must equal the oracle's exactly,
// bytes of slots nobody wrote must keep their poison, and the fp8 count must match.
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
#include "support/test_support.hpp"

namespace {

using namespace attn;

struct Case {
  KVLayout layout;
  DType storage;
  DType source;
  int32_t block_size, heads, head_size, head_size_v;
  bool per_head;
  int32_t num_blocks = 6;
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
  spec.kv_cache_dtype = c.storage == DType::fp8_e4m3 ? KVCacheDType::fp8_e4m3
                        : c.storage == DType::fp8_e5m2 ? KVCacheDType::fp8_e5m2 : KVCacheDType::auto_;
  spec.block_size = c.block_size;
  spec.num_kv_heads = mla ? 1 : c.heads;
  spec.head_size = c.head_size;
  spec.head_size_v = c.head_size_v;
  spec.per_head_scales = c.per_head;
  spec.num_blocks = c.num_blocks;
  KVCache cache(spec);
  const bool fp8 = c.storage == DType::fp8_e4m3 || c.storage == DType::fp8_e5m2;
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
  const bool extremes = fp8 && seed % 2;
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
  for (int64_t t = 0; t < n; ++t) {
    if (slots[std::size_t(t)] < 0) continue;
    const int64_t b = slots[std::size_t(t)] / spec.block_size, off = slots[std::size_t(t)] % spec.block_size;
    for (int32_t h = 0; h < kv_heads; ++h)
      for (int is_v = 0; is_v < (mla ? 1 : 2); ++is_v) {
        const int32_t width = is_v ? hv : hs;
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
