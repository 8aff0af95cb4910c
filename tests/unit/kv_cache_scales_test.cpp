// KVCache scales, copy_block / fill and caches over engine memory (StridedKV): bad scales and
// block ids refused by name; strided caches read and write the engine's rows in place.
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

// --- scales ---

struct KVCacheScales : ::testing::Test {
  KVCacheSpec spec = [] {
    KVCacheSpec s = small_kv_spec(DType::fp8_e4m3);
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

// --- copy_block / fill ---

TEST(KVCacheCopyBlock, CopiesKAndVOfTheBlock) {
  KVCache c(small_kv_spec());
  const PagedKV p = c.view();
  float* base = static_cast<float*>(c.data());
  for (int64_t i = 0; i < p.block_stride; ++i) base[1 * p.block_stride + i] = float(i);
  c.copy_block(1, 3);
  for (int64_t i = 0; i < p.block_stride; ++i) ASSERT_EQ(base[3 * p.block_stride + i], float(i));
}

TEST(KVCacheCopyBlock, SourceOutOfRange) {
  KVCache c(small_kv_spec());
  EXPECT_TRUE(throws_error([&] { c.copy_block(4, 0); }, {"src_block=4", "[0, 4)"}));
}

TEST(KVCacheCopyBlock, DestinationNegative) {
  KVCache c(small_kv_spec());
  EXPECT_TRUE(throws_error([&] { c.copy_block(0, -1); }, {"dst_block=-1", "[0, 4)"}));
}

TEST(KVCacheFill, PoisonsEveryElement) {
  KVCache c(small_kv_spec(DType::bfloat16));
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
  KVCacheSpec s = small_kv_spec(DType::float32, KVLayout::HND);
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
  KVCacheSpec s = small_kv_spec(DType::float32, KVLayout::HND);
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
