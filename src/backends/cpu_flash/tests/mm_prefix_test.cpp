// Multimodal prefix attention (use_mm_prefix): queries inside a sequence's prefix range see the
// whole range; everything else stays causal. Checked against the fp64 oracle, on every ISA
// variant the conformance suite runs, and shown to differ from plain causal attention.
#include <gtest/gtest.h>

#include "attn/attn.hpp"
#include "support/expect_error.hpp"
#include "support/test_support.hpp"

namespace attn::test {
namespace {

CaseSpec mm_case(DType io, KVCacheDType kv) {
  CaseSpec spec;
  spec.config.num_heads = 8, spec.config.num_kv_heads = 2, spec.config.head_size = 64;
  spec.config.dtype = io, spec.config.kv_cache_dtype = kv;
  spec.config.use_mm_prefix = true;
  // A whole prompt, a chunk inside a long prompt (split-KV range), and a decode after the prefix.
  spec.seqs = {{0, 90}, {1200, 12}, {300, 1}};
  spec.seed = fresh_seed();
  return spec;
}

/// The case with explicit prefix ranges (the ones make_case draws are random).
Case with_ranges(const CaseSpec& spec, std::vector<int32_t> ranges) {
  Case c = make_case(spec, "cpu_flash");
  c.md.mm_prefix_ranges = std::move(ranges);
  return c;
}

TEST(CpuFlashMmPrefix, QueriesInsideThePrefixSeeAllOfIt) {
  for (DType io : {DType::float32, DType::bfloat16})
    for (KVCacheDType kv : {KVCacheDType::auto_, KVCacheDType::fp8_e4m3}) {
      const CaseSpec spec = mm_case(io, kv);
      // [10, 70) inside the prompt; [1195, 1207) straddles the chunk's first tokens; none for the decode.
      Case c = with_ranges(spec, {10, 70, 1195, 1207, 0, 0});
      run_forward(c);
      const CompareResult r = compare_output(c, reference_attention(c));
      EXPECT_TRUE(r.ok) << spec.describe() << ": " << r.message;
    }
}

TEST(CpuFlashMmPrefix, RangesChangeTheOutputOnlyOnMmLayers) {
  CaseSpec spec = mm_case(DType::float32, KVCacheDType::auto_);
  Case mm = with_ranges(spec, {10, 70, 1195, 1207, 0, 0});
  run_forward(mm);
  Case causal = with_ranges(spec, {});
  run_forward(causal);
  EXPECT_FALSE(compare_output(mm, reference_attention(causal)).ok) << "the prefix must change the output";
  // A layer without use_mm_prefix ignores the step's ranges.
  spec.config.use_mm_prefix = false;
  Case plain = with_ranges(spec, {10, 70, 1195, 1207, 0, 0});
  run_forward(plain);
  EXPECT_TRUE(compare_output(plain, reference_attention(causal)).ok);
}

TEST(CpuFlashMmPrefix, RangesBeyondTheSequenceAreRejected) {
  Case c = with_ranges(mm_case(DType::float32, KVCacheDType::auto_), {10, 91, 0, 0, 0, 0});  // sequence 0 has 90 tokens
  EXPECT_TRUE(throws_error([&] { run_forward(c); }, {"metadata.mm_prefix_ranges[0]=10..91", "<= seq_lens[0] = 90"}));
  Case odd = with_ranges(mm_case(DType::float32, KVCacheDType::auto_), {0, 5});
  EXPECT_TRUE(throws_error([&] { run_forward(odd); }, {"metadata.mm_prefix_ranges.size()=2", "2 * num_seqs = 6"}));
  EXPECT_TRUE(throws_error([&] { BatchMetadata::build({{0, 8, {0}, 6, 9}}, 16, 4); }, {"seqs[0].mm_start/mm_end=6/9"}));
}

}  // namespace
}  // namespace attn::test
