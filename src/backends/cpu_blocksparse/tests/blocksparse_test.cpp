// cpu_blocksparse against the fp64 block-sparse oracle (Phi-3-small pattern, homo- and per-head).
#include <gtest/gtest.h>

#include "attn/attn.hpp"
#include "backends/cpu_blocksparse/tests/blocksparse_case.hpp"
#include "kernels/gather/mla_kernel.hpp"
#include "support/cpu_isa_env.hpp"
#include "support/expect_error.hpp"
#include "support/mla_reference.hpp"

namespace attn::test {
namespace {

void expect_matches(const CaseSpec& spec) {
  Case c = make_case(spec, "cpu_blocksparse");
  run_forward(c);
  const CompareResult r = compare_output(c, blocksparse_reference(c));
  EXPECT_TRUE(r.ok) << spec.describe() << ": " << r.message << " (max abs err " << r.max_abs_err << ")";
}

// Under each attend kernel build this CPU runs (the shared cpu_mla kernels).
TEST(CpuBlockSparse, MatchesOracleForEveryDeclaredDtype) {
  const uint64_t seed = fresh_seed();
  auto desc = Registry::instance().find("cpu_blocksparse");
  ASSERT_TRUE(desc);
  for_each_cpu_isa(family_isas_here({mla::Isa::avx512_bf16, mla::Isa::avx512, mla::Isa::generic}), [&](mla::Isa isa) {
    const Case probe = make_case(blocksparse_case(DType::bfloat16, KVCacheDType::auto_, seed), "cpu_blocksparse");
    EXPECT_EQ(probe.impl->variant(), std::string(mla::variant_name(isa)));
    for (DType io : desc->caps.dtypes)
      for (KVCacheDType kv : desc->caps.kv_cache_dtypes) expect_matches(blocksparse_case(io, kv, seed));
  });
}

TEST(CpuBlockSparse, RefusesThePairOrderedCache) {
  // Its rows are read contiguously: an HND_PAIRS cache is refused, naming the layout.
  CaseSpec spec = blocksparse_case(DType::bfloat16, KVCacheDType::auto_, fresh_seed());
  spec.layout = KVLayout::HND_PAIRS;
  Case c = make_case(spec, "cpu_blocksparse");
  EXPECT_TRUE(throws_error([&] { run_forward(c); }, {"cache.layout=HND_PAIRS", "NHD or HND"}));
}

TEST(CpuBlockSparse, PerHeadScalesOddBlocksAliasedTables) {
  CaseSpec spec = blocksparse_case(DType::bfloat16, KVCacheDType::fp8_e4m3, fresh_seed());
  spec.config.use_per_head_quant_scales = true;
  spec.per_head_scales = true;
  spec.block_size = 5;
  spec.alias_prefix = true;
  spec.seqs = {{60, 1}, {60, 9}, {33, 2}};
  expect_matches(spec);
}

TEST(CpuBlockSparse, PatternsFromDenseToVerySparse) {
  for (auto [local, stride] : {std::pair{1, 1}, std::pair{1, 100}, std::pair{3, 2}, std::pair{100, 100}}) {
    CaseSpec spec = blocksparse_case(DType::float32, KVCacheDType::auto_, fresh_seed());
    spec.config.bs_local_blocks = local;
    spec.config.bs_vert_stride = stride;
    spec.num_threads = 2;
    spec.seqs = {{700, 1}, {0, 40}};
    expect_matches(spec);
  }
}

TEST(CpuBlockSparse, PerHeadPatternsShiftTheVerticalColumns) {
  // Phi-3-small's heterogeneous heads: head h's columns shift by h * step (steps 1 and 2, GQA 4
  // and MHA, fp8 per-head scales included), so heads of one KV group read different key lists.
  for (int step : {1, 2}) {
    for (int kv_heads : {2, 8}) {
      CaseSpec spec = blocksparse_case(DType::bfloat16, KVCacheDType::auto_, fresh_seed());
      spec.config.bs_head_sliding_step = step;
      spec.config.num_kv_heads = kv_heads;
      spec.num_threads = 2;
      expect_matches(spec);
    }
  }
  CaseSpec fp8 = blocksparse_case(DType::float32, KVCacheDType::fp8_e4m3, fresh_seed());
  fp8.config.bs_head_sliding_step = 1;
  fp8.config.use_per_head_quant_scales = true;
  fp8.per_head_scales = true;
  expect_matches(fp8);
}

TEST(CpuBlockSparse, PerHeadPatternDiffersFromHomoHead) {
  // The oracle and the kernel both change with the step: the per-head case is really tested.
  CaseSpec spec = blocksparse_case(DType::float32, KVCacheDType::auto_, 11);
  Case homo = make_case(spec, "cpu_blocksparse");
  spec.config.bs_head_sliding_step = 1;
  Case hetero = make_case(spec, "cpu_blocksparse");
  run_forward(homo);
  run_forward(hetero);
  EXPECT_FALSE(compare_output(hetero, blocksparse_reference(homo)).ok);
  EXPECT_TRUE(compare_output(hetero, blocksparse_reference(hetero)).ok);
}

TEST(CpuBlockSparse, DensePatternEqualsDenseAttention) {
  // local blocks covering the whole context: no block is masked, so it is ordinary causal attention.
  CaseSpec spec = blocksparse_case(DType::float32, KVCacheDType::auto_, fresh_seed());
  spec.config.bs_local_blocks = 1000;
  Case c = make_case(spec, "cpu_blocksparse");
  run_forward(c);
  const CompareResult r = compare_output(c, reference_attention(c));
  EXPECT_TRUE(r.ok) << spec.describe() << ": " << r.message;
}

}  // namespace
}  // namespace attn::test
