// BlockAllocator and SequenceBlocks (kv_cache.hpp): reference counts for shared prefixes, errors
// for bad block ids and double frees, and copy-on-write when a forked sequence appends into a
// shared, partly filled block (the block's content is copied through the cache).
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "attn/kv_cache.hpp"
#include "support/expect_error.hpp"

namespace {

using namespace attn;
using attn::test::throws_error;

TEST(BlockAllocator, HandsOutBlocksInOrderUntilExhausted) {
  BlockAllocator a(3);
  EXPECT_EQ(a.num_blocks(), 3);
  EXPECT_EQ(a.allocate(), 0);
  EXPECT_EQ(a.allocate(), 1);
  EXPECT_EQ(a.allocate(), 2);
  EXPECT_EQ(a.num_free(), 0);
  EXPECT_TRUE(throws_error([&] { a.allocate(); }, {"out of KV-cache blocks", "all 3 in use"}));
}

TEST(BlockAllocator, RefCountsReturnBlocksAtZero) {
  BlockAllocator a(2);
  const int32_t b = a.allocate();
  EXPECT_EQ(a.ref_count(b), 1);
  a.retain(b);
  EXPECT_EQ(a.ref_count(b), 2);
  a.release(b);
  EXPECT_EQ(a.ref_count(b), 1);
  EXPECT_EQ(a.num_free(), 1);
  a.release(b);
  EXPECT_EQ(a.ref_count(b), 0);
  EXPECT_EQ(a.num_free(), 2);
  EXPECT_EQ(a.allocate(), b) << "a released block is reused first";
}

TEST(BlockAllocator, ZeroBlocks) { EXPECT_TRUE(throws_error([] { BlockAllocator a(0); }, {"num_blocks=0", "> 0"})); }

TEST(BlockAllocator, DoubleFree) {
  BlockAllocator a(2);
  const int32_t b = a.allocate();
  a.release(b);
  EXPECT_TRUE(throws_error([&] { a.release(b); }, {"block=0", "double free"}));
  EXPECT_EQ(a.num_free(), 2) << "the failed release changed nothing";
}

TEST(BlockAllocator, RetainOfAFreeBlock) {
  BlockAllocator a(2);
  EXPECT_TRUE(throws_error([&] { a.retain(1); }, {"block=1", "an allocated block (it is free)"}));
}

TEST(BlockAllocator, OutOfRangeIds) {
  BlockAllocator a(2);
  EXPECT_TRUE(throws_error([&] { a.retain(2); }, {"block=2", "[0, 2)"}));
  EXPECT_TRUE(throws_error([&] { a.release(-1); }, {"block=-1", "[0, 2)"}));
  EXPECT_TRUE(throws_error([&] { (void)a.ref_count(7); }, {"block=7", "[0, 2)"}));
}

TEST(SequenceBlocks, AppendAllocatesWholeBlocks) {
  BlockAllocator a(8);
  SequenceBlocks s(a, 4);
  s.append(5);
  EXPECT_EQ(s.num_tokens(), 5);
  EXPECT_EQ(s.block_ids(), (std::vector<int32_t>{0, 1}));
  s.append(3);  // fills block 1 exactly
  EXPECT_EQ(s.block_ids().size(), 2u);
  s.append(1);
  EXPECT_EQ(s.block_ids().size(), 3u);
  s.append(0);
  EXPECT_EQ(s.num_tokens(), 9);
}

TEST(SequenceBlocks, NegativeAppend) {
  BlockAllocator a(2);
  SequenceBlocks s(a, 4);
  EXPECT_TRUE(throws_error([&] { s.append(-1); }, {"n=-1", ">= 0"}));
}

TEST(BlockAllocator, PoolBeyondTheBlockLimit) {
  // 2^31 - 1 blocks once meant 16 GiB of bookkeeping before the first allocation.
  EXPECT_TRUE(throws_error([] { BlockAllocator a(std::numeric_limits<int32_t>::max()); },
                           {"num_blocks=2147483647", "<= 16777216"}));
}

TEST(SequenceBlocks, AppendBeyondOneSequenceIsNamedNotWrapped) {
  BlockAllocator a(2);
  SequenceBlocks s(a, 4);
  s.append(3);
  const int64_t huge = std::numeric_limits<int64_t>::max();
  EXPECT_TRUE(throws_error([&] { s.append(huge); }, {"tokens + n=3 + 9223372036854775807 (beyond 64 bits)"}));
  EXPECT_TRUE(throws_error([&] { s.append(int64_t(1) << 31); }, {"tokens + n=3 + 2147483648", "at most 2147483647"}));
  EXPECT_EQ(s.num_tokens(), 3);
}

TEST(SequenceBlocks, AppendBeyondThePoolFails) {
  BlockAllocator a(2);
  SequenceBlocks s(a, 4);
  EXPECT_TRUE(throws_error([&] { s.append(9); }, {"out of KV-cache blocks"}));
}

TEST(SequenceBlocks, DestructorReleasesEveryBlock) {
  BlockAllocator a(4);
  {
    SequenceBlocks s(a, 4);
    s.append(10);
    EXPECT_EQ(a.num_free(), 1);
  }
  EXPECT_EQ(a.num_free(), 4);
}

TEST(SequenceBlocks, MoveTransfersOwnership) {
  BlockAllocator a(4);
  {
    SequenceBlocks s(a, 4);
    s.append(6);
    SequenceBlocks moved(std::move(s));
    EXPECT_EQ(moved.block_ids().size(), 2u);
    EXPECT_EQ(a.ref_count(0), 1);
  }
  EXPECT_EQ(a.num_free(), 4) << "released once, by the moved-to object";
}

TEST(SequenceBlocks, ForkSharesEveryBlock) {
  BlockAllocator a(8);
  SequenceBlocks parent(a, 4);
  parent.append(6);
  {
    SequenceBlocks child = parent.fork();
    EXPECT_EQ(child.block_ids(), parent.block_ids());
    EXPECT_EQ(child.num_tokens(), 6);
    for (int32_t b : parent.block_ids()) EXPECT_EQ(a.ref_count(b), 2);
  }
  for (int32_t b : parent.block_ids()) EXPECT_EQ(a.ref_count(b), 1) << "the child's release keeps the parent's blocks";
}

struct CopyOnWrite : ::testing::Test {
  BlockAllocator alloc{8};
  KVCache cache{KVCacheSpec{.num_blocks = 8, .block_size = 4, .num_kv_heads = 1, .head_size = 2, .dtype = DType::float32}};
  int64_t block_floats() const { return cache.view().block_stride; }
  float* block(int32_t b) { return static_cast<float*>(cache.data()) + b * block_floats(); }
};

TEST_F(CopyOnWrite, AppendIntoASharedPartialBlockCopiesItFirst) {
  SequenceBlocks parent(alloc, 4);
  parent.append(6);  // blocks 0 (full) and 1 (2 of 4 tokens)
  for (int64_t i = 0; i < block_floats(); ++i) block(1)[i] = float(100 + i);
  SequenceBlocks child = parent.fork();

  child.append(1, &cache);
  ASSERT_EQ(child.block_ids().size(), 2u);
  EXPECT_EQ(child.block_ids()[0], parent.block_ids()[0]) << "the full prefix block stays shared";
  const int32_t fresh = child.block_ids()[1];
  EXPECT_NE(fresh, parent.block_ids()[1]) << "the partial block was copied, not written in place";
  for (int64_t i = 0; i < block_floats(); ++i) ASSERT_EQ(block(fresh)[i], float(100 + i)) << "content copied at " << i;
  EXPECT_EQ(alloc.ref_count(parent.block_ids()[0]), 2);
  EXPECT_EQ(alloc.ref_count(parent.block_ids()[1]), 1);
  EXPECT_EQ(alloc.ref_count(fresh), 1);
  EXPECT_EQ(child.num_tokens(), 7);
  EXPECT_EQ(parent.num_tokens(), 6);
}

TEST_F(CopyOnWrite, AppendAfterAFullSharedBlockAllocatesWithoutCopying) {
  SequenceBlocks parent(alloc, 4);
  parent.append(8);  // two full blocks
  SequenceBlocks child = parent.fork();
  const int free_before = alloc.num_free();
  child.append(1, &cache);
  EXPECT_EQ(child.block_ids().size(), 3u);
  EXPECT_EQ(alloc.num_free(), free_before - 1) << "only the new tail block";
  EXPECT_EQ(alloc.ref_count(parent.block_ids()[1]), 2) << "the full shared block is not copied";
}

TEST_F(CopyOnWrite, AppendToAnUnsharedPartialBlockWritesInPlace) {
  SequenceBlocks s(alloc, 4);
  s.append(2);
  const auto before = s.block_ids();
  s.append(1, &cache);
  EXPECT_EQ(s.block_ids(), before);
}

TEST_F(CopyOnWrite, ParentAppendAlsoCopiesWhenTheChildStillShares) {
  SequenceBlocks parent(alloc, 4);
  parent.append(3);
  for (int64_t i = 0; i < block_floats(); ++i) block(0)[i] = float(i);
  SequenceBlocks child = parent.fork();
  parent.append(1, &cache);
  EXPECT_NE(parent.block_ids()[0], child.block_ids()[0]);
  for (int64_t i = 0; i < block_floats(); ++i) ASSERT_EQ(block(parent.block_ids()[0])[i], float(i));
}

}  // namespace
