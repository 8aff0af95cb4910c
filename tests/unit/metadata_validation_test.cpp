// BatchMetadata (metadata.hpp): build() and validate() reject every malformed index or length
// (one test per bad input, after shared/reference/ecosystem-reliability.md §B.3) with an
// attn::Error naming the argument; good inputs produce vLLM v1's layout.
#include <gtest/gtest.h>

#include <limits>
#include <numeric>

#include "attn/layer_config.hpp"
#include "attn/metadata.hpp"
#include "support/expect_error.hpp"

namespace {

using namespace attn;
using attn::test::throws_error;

constexpr int32_t kBlockSize = 4, kNumBlocks = 8;

// --- build ---

TEST(MetadataBuild, MixedPrefillChunkedPrefillAndDecode) {
  // prefill 5 new; chunked prefill 6 cached + 3 new; decode 9 cached + 1 new.
  const auto md = BatchMetadata::build({{0, 5, {3, 1}}, {6, 3, {0, 2, 4}}, {9, 1, {7, 6, 5}}}, kBlockSize, kNumBlocks);
  EXPECT_EQ(md.num_seqs, 3);
  EXPECT_EQ(md.num_tokens, 9);
  EXPECT_EQ(md.query_start_loc, (std::vector<int32_t>{0, 5, 8, 9}));
  EXPECT_EQ(md.seq_lens, (std::vector<int32_t>{5, 9, 10}));
  EXPECT_EQ(md.max_query_len, 5);
  EXPECT_EQ(md.max_seq_len, 10);
  EXPECT_EQ(md.max_blocks_per_seq, 3);
  EXPECT_EQ(md.block_table, (std::vector<int32_t>{3, 1, -1, 0, 2, 4, 7, 6, 5}));
  // slot = block * block_size + offset, for positions 0..4; 6..8; 9.
  EXPECT_EQ(md.slot_mapping, (std::vector<int64_t>{12, 13, 14, 15, 4, 2 * 4 + 2, 2 * 4 + 3, 4 * 4 + 0, 5 * 4 + 1}));
  EXPECT_EQ(md.context_len(1), 6);
  EXPECT_EQ(md.query_len(2), 1);
  EXPECT_EQ(md.blocks(2)[0], 7);
  EXPECT_NO_THROW(md.validate(kNumBlocks, kBlockSize));
  EXPECT_NE(md.to_string().find("num_tokens=9"), std::string::npos);
}

TEST(MetadataBuild, EmptyBatchIsValid) {
  const auto md = BatchMetadata::build({}, kBlockSize, kNumBlocks);
  EXPECT_EQ(md.num_seqs, 0);
  EXPECT_EQ(md.num_tokens, 0);
  EXPECT_NO_THROW(md.validate(kNumBlocks, kBlockSize));
}

TEST(MetadataBuild, ExtraBlockIdsBeyondTheSequenceAreIgnored) {
  // Only the blocks the sequence needs are checked and copied (the scheduler may over-reserve).
  const auto md = BatchMetadata::build({{0, 3, {2, 99}}}, kBlockSize, kNumBlocks);
  EXPECT_EQ(md.block_table, (std::vector<int32_t>{2}));
}

TEST(MetadataBuild, NegativeContextLength) {
  EXPECT_TRUE(throws_error([] { BatchMetadata::build({{-1, 2, {0}}}, kBlockSize, kNumBlocks); },
                           {"seqs[0].context_len=-1", ">= 0"}));
}

TEST(MetadataBuild, NegativeQueryLength) {
  EXPECT_TRUE(throws_error([] { BatchMetadata::build({{0, 1, {0}}, {4, -3, {1}}}, kBlockSize, kNumBlocks); },
                           {"seqs[1].query_len=-3", ">= 0"}));
}

TEST(MetadataBuild, BlockTableTooShortForTheSequence) {
  EXPECT_TRUE(throws_error([] { BatchMetadata::build({{6, 3, {0, 1}}}, kBlockSize, kNumBlocks); },
                           {"seqs[0].block_ids.size()=2", ">= 3 blocks for 9 tokens"}));
}

TEST(MetadataBuild, BlockIdAtNumBlocks) {
  EXPECT_TRUE(throws_error([] { BatchMetadata::build({{0, 6, {0, 8}}}, kBlockSize, kNumBlocks); },
                           {"seqs[0].block_ids[1]=8", "[0, 8)"}));
}

TEST(MetadataBuild, NegativeBlockId) {
  EXPECT_TRUE(throws_error([] { BatchMetadata::build({{0, 2, {-1}}}, kBlockSize, kNumBlocks); },
                           {"seqs[0].block_ids[0]=-1", "[0, 8)"}));
}

TEST(MetadataBuild, ZeroBlockSize) {
  EXPECT_TRUE(throws_error([] { BatchMetadata::build({{0, 2, {0}}}, 0, kNumBlocks); }, {"block_size=0", "> 0"}));
}

TEST(MetadataBuild, ZeroBlocks) {
  EXPECT_TRUE(throws_error([] { BatchMetadata::build({{0, 2, {0}}}, kBlockSize, 0); }, {"num_blocks=0", "> 0"}));
}

TEST(MetadataBuild, SequenceLongerThanInt32) {
  EXPECT_TRUE(throws_error([] { BatchMetadata::build({{int64_t(1) << 31, 1, {}}}, kBlockSize, kNumBlocks); },
                           {"seqs[0].context_len + query_len=2147483648 + 1", "at most 2147483647"}));
}

TEST(MetadataBuild, LengthsWhoseSumWrapsAreRefused) {
  // context_lens=[2**62], query_lens=[2**62]: the sum wrapped negative, needed no blocks, and the
  // table copy then read past block_ids, reporting a block id the caller never passed.
  const int64_t big = int64_t(1) << 62;
  EXPECT_TRUE(throws_error([&] { BatchMetadata::build({{big, big, {0}}}, kBlockSize, kNumBlocks); },
                           {"seqs[0].context_len + query_len=4611686018427387904 + 4611686018427387904 (beyond 64 bits)"}));
}

TEST(MetadataBuild, SameBlockTwiceInOneSequenceIsRefused) {
  // Positions 0..3 and 8..11 would share slots: the second write would overwrite the first.
  EXPECT_TRUE(throws_error([] { BatchMetadata::build({{0, 9, {5, 1, 5}}}, kBlockSize, kNumBlocks); },
                           {"seqs[0].block_ids[0]=5", "distinct blocks within one sequence", "also block_ids[2]"}));
  // A decode step writing into a block the cached context also lists.
  EXPECT_TRUE(throws_error([] { BatchMetadata::build({{8, 1, {3, 6, 3}}}, kBlockSize, kNumBlocks); },
                           {"seqs[0].block_ids[2]=3", "for the blocks this step writes", "also block_ids[0]"}));
}

TEST(MetadataBuild, RepeatsOnlyWhereTheyCannotCollideStayLegal) {
  // Two sequences sharing their first block (a common prompt prefix); padding past the blocks a
  // sequence needs (block tables padded with 0); a null block repeated over cached context that
  // a sliding window dropped, as engines do.
  const auto md = BatchMetadata::build({{4, 1, {2, 3}}, {4, 2, {2, 6, 6, 6}}, {8, 1, {0, 0, 7}}}, kBlockSize, kNumBlocks);
  EXPECT_EQ(md.block_table, (std::vector<int32_t>{2, 3, -1, 2, 6, -1, 0, 0, 7}));
}

TEST(MetadataCausal, EncoderOnlyLayerRefusesCausalMetadata) {
  LayerConfig encoder;
  encoder.attn_type = AttnType::encoder_only;
  const auto causal = BatchMetadata::build({{0, 3, {0}}}, kBlockSize, kNumBlocks);
  EXPECT_TRUE(throws_error([&] { check_causal(encoder, causal); },
                           {"metadata.causal=true", "expected false for this encoder_only layer", "causal=false"}));
  EXPECT_NO_THROW(check_causal(encoder, BatchMetadata::build({{0, 3, {0}}}, kBlockSize, kNumBlocks, false)));
}

TEST(MetadataCausal, DecoderLayerRefusesBidirectionalMetadata) {
  const LayerConfig decoder;
  const auto bidirectional = BatchMetadata::build({{0, 3, {0}}}, kBlockSize, kNumBlocks, false);
  EXPECT_TRUE(throws_error([&] { check_causal(decoder, bidirectional); },
                           {"metadata.causal=false", "expected true for this decoder layer"}));
  EXPECT_NO_THROW(check_causal(decoder, BatchMetadata::build({{0, 3, {0}}}, kBlockSize, kNumBlocks)));
  LayerConfig prefix_lm;
  prefix_lm.use_non_causal = true;
  EXPECT_TRUE(throws_error([&] { check_causal(prefix_lm, BatchMetadata::build({{0, 3, {0}}}, kBlockSize, kNumBlocks)); },
                           {"metadata.causal=true", "use_non_causal layer"}));
}

TEST(MetadataBuild, BlockSizeBeyondTheLimit) {
  EXPECT_TRUE(throws_error([] { BatchMetadata::build({{0, 2, {0}}}, 1 << 20, kNumBlocks); }, {"block_size=1048576", "<= 65536"}));
}

TEST(MetadataBuild, TotalTokensBeyondInt32) {
  // Two sequences of 2^30 + 1 new tokens each: every length fits, their sum does not.
  const int64_t n = (int64_t(1) << 30) + 1, bs = int64_t(1) << 16;
  // Distinct blocks within a sequence; the two sequences share them (legal).
  std::vector<int32_t> ids(std::size_t((n + bs - 1) / bs));
  std::iota(ids.begin(), ids.end(), 0);
  const int32_t num_blocks = int32_t(ids.size());
  EXPECT_TRUE(throws_error([&] { BatchMetadata::build({{0, n, ids}, {0, n, ids}}, int32_t(bs), num_blocks); },
                           {"num_tokens=1073741825 + 1073741825 = 2147483650", "at most 2147483647"}));
}

// --- validate: metadata assembled by hand ---

struct MetadataValidate : ::testing::Test {
  BatchMetadata md = BatchMetadata::build({{0, 5, {3, 1}}, {6, 3, {0, 2, 4}}}, kBlockSize, kNumBlocks);
  void validate() const { md.validate(kNumBlocks, kBlockSize); }
};

TEST_F(MetadataValidate, BuiltMetadataIsValid) { EXPECT_NO_THROW(validate()); }

TEST_F(MetadataValidate, BlockSizeDiffersFromTheCache) {
  EXPECT_TRUE(throws_error([&] { md.validate(kNumBlocks, 16); }, {"metadata.block_size=4", "the cache's block_size 16"}));
}

TEST_F(MetadataValidate, NegativeNumSeqs) {
  md.num_seqs = -1;
  EXPECT_TRUE(throws_error([&] { validate(); }, {"metadata.num_seqs=-1", ">= 0"}));
}

TEST_F(MetadataValidate, NumSeqsAtInt32MaxReportsTheExpectedSizeUnwrapped) {
  md.num_seqs = std::numeric_limits<int32_t>::max();
  EXPECT_TRUE(throws_error([&] { validate(); }, {"metadata.query_start_loc.size()=3", "num_seqs + 1 = 2147483648"}));
}

TEST_F(MetadataValidate, QueryStartLocWrongLength) {
  md.query_start_loc.pop_back();
  EXPECT_TRUE(throws_error([&] { validate(); }, {"metadata.query_start_loc.size()=2", "num_seqs + 1 = 3"}));
}

TEST_F(MetadataValidate, QueryStartLocEmpty) {
  md.query_start_loc.clear();
  EXPECT_TRUE(throws_error([&] { validate(); }, {"metadata.query_start_loc.size()=0"}));
}

TEST_F(MetadataValidate, QueryStartLocNotStartingAtZero) {
  md.query_start_loc = {1, 5, 8};
  EXPECT_TRUE(throws_error([&] { validate(); }, {"metadata.query_start_loc[0]=1", "expected 0"}));
}

TEST_F(MetadataValidate, QueryStartLocDecreasing) {
  md.query_start_loc = {0, 9, 8};
  EXPECT_TRUE(throws_error([&] { validate(); }, {"metadata.query_start_loc[2]=8", "non-decreasing (>= 9)"}));
}

TEST_F(MetadataValidate, QueryStartLocLastNotNumTokens) {
  md.query_start_loc = {0, 5, 7};
  EXPECT_TRUE(throws_error([&] { validate(); }, {"metadata.query_start_loc[num_seqs]=7", "num_tokens = 8"}));
}

TEST_F(MetadataValidate, SeqLensWrongLength) {
  md.seq_lens.push_back(4);
  EXPECT_TRUE(throws_error([&] { validate(); }, {"metadata.seq_lens.size()=3", "num_seqs = 2"}));
}

TEST_F(MetadataValidate, NegativeSeqLen) {
  md.seq_lens[0] = -5;
  EXPECT_TRUE(throws_error([&] { validate(); }, {"metadata.seq_lens[0]=-5", ">= 0"}));
}

TEST_F(MetadataValidate, SeqLenShorterThanItsQuery) {
  md.seq_lens[0] = 4;  // 5 query tokens cannot fit in a 4-token sequence (kv_len < q_len)
  EXPECT_TRUE(throws_error([&] { validate(); }, {"metadata.seq_lens[0]=4", ">= the sequence's query length 5"}));
}

TEST_F(MetadataValidate, BlockTableRowTooShortForSeqLen) {
  md.seq_lens[1] = 13;  // 4 blocks needed, rows hold 3
  md.max_seq_len = 13;
  EXPECT_TRUE(throws_error([&] { validate(); }, {"metadata.seq_lens[1]=13", "<= max_blocks_per_seq * block_size = 12"}));
}

TEST_F(MetadataValidate, BlockTableEntryOutOfRange) {
  md.block_table[3 + 2] = 9001;
  EXPECT_TRUE(throws_error([&] { validate(); }, {"metadata.block_table[1][2]=9001", "[0, 8)"}));
}

TEST_F(MetadataValidate, BlockTablePaddingEntryThatIsRead) {
  // Sequence 0 needs 2 blocks; its padding entry (-1) is harmless until seq_lens says otherwise.
  md.seq_lens[0] = 9;
  EXPECT_TRUE(throws_error([&] { validate(); }, {"metadata.block_table[0][2]=-1", "[0, 8)"}));
}

TEST_F(MetadataValidate, BlockTableWrongSize) {
  md.block_table.pop_back();
  EXPECT_TRUE(throws_error([&] { validate(); }, {"metadata.block_table.size()=5", "num_seqs * max_blocks_per_seq = 6"}));
}

TEST_F(MetadataValidate, NegativeMaxBlocksPerSeq) {
  md.max_blocks_per_seq = -3;
  EXPECT_TRUE(throws_error([&] { validate(); }, {"metadata.max_blocks_per_seq=-3", ">= 0"}));
}

TEST_F(MetadataValidate, MaxQueryLenTooSmall) {
  md.max_query_len = 4;
  EXPECT_TRUE(throws_error([&] { validate(); }, {"metadata.max_query_len=4", ">= 5"}));
}

TEST_F(MetadataValidate, MaxSeqLenTooSmall) {
  md.max_seq_len = 5;
  EXPECT_TRUE(throws_error([&] { validate(); }, {"metadata.max_seq_len=5", ">= 9"}));
}

TEST_F(MetadataValidate, SlotMappingWrongLength) {
  md.slot_mapping.push_back(0);
  EXPECT_TRUE(throws_error([&] { validate(); }, {"metadata.slot_mapping.size()=9", "num_tokens = 8"}));
}

TEST_F(MetadataValidate, SlotMappingEmptyIsAllowed) {
  md.slot_mapping.clear();  // forward-only metadata (no new K/V to write)
  EXPECT_NO_THROW(validate());
}

TEST_F(MetadataValidate, SlotOutOfRange) {
  md.slot_mapping[4] = 32;
  EXPECT_TRUE(throws_error([&] { validate(); }, {"metadata.slot_mapping[4]=32", "[0, 32)"}));
}

TEST_F(MetadataValidate, SlotBelowMinusOne) {
  md.slot_mapping[0] = -7;
  EXPECT_TRUE(throws_error([&] { validate(); }, {"metadata.slot_mapping[0]=-7", "-1 (skip)"}));
}

TEST_F(MetadataValidate, SlotDisagreeingWithTheBlockTableIsRefused) {
  // Sequence 1's first new token is position 6: block 2 (table entry 1), offset 2 = slot 10. Slot
  // 30 is in range and unused, but the kernels would read slot 10, which nobody wrote.
  ASSERT_EQ(md.slot_mapping[5], 10);
  md.slot_mapping[5] = 30;
  EXPECT_TRUE(throws_error([&] { validate(); },
                           {"metadata.slot_mapping[5]=30", "-1 (skip) or 10", "position 6 of sequence 1"}));
}

TEST_F(MetadataValidate, SkippedSlotsStayLegal) {
  md.slot_mapping[5] = -1;  // a padding token an engine does not write
  EXPECT_NO_THROW(validate());
}

}  // namespace
