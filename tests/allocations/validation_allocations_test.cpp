// The checks a step runs on its inputs allocate nothing when they pass: metadata validation (per
// plan), the plan's argument checks, the run's tensor checks and a host cache write's checks.
// Their messages are built only on failure (ATTN_REQUIRE, string_view names in checked.hpp).
#include <gtest/gtest.h>

#include "allocations/counting_new.hpp"
#include "support/test_support.hpp"

namespace attn::test {
namespace {

// A mixed step (prefill, chunked prefill, decode) with GQA, over a permuted block table.
CaseSpec mixed_step() {
  CaseSpec s;
  s.config.num_heads = 8, s.config.num_kv_heads = 2, s.config.head_size = 64;
  s.config.dtype = DType::bfloat16;
  s.seqs = {{0, 70}, {37, 9}, {300, 1}, {5, 1}, {1100, 1}};
  s.block_size = 16;
  s.seed = 11;
  return s;
}

TEST(ValidationAllocations, PassingStepChecksAllocateNothing) {
  Case c = make_case(mixed_step(), "cpu_flash");
  const KVCacheSpec& spec = c.cache->spec();
  const LayerConfig& cfg = c.params.config;
  Buffer k(DType::bfloat16, {c.md.num_tokens, cfg.num_kv_heads, cfg.head_size});
  Buffer v(DType::bfloat16, {c.md.num_tokens, cfg.num_kv_heads, cfg.head_size});
  const TensorView q = c.q.view(), out = c.out.view(), kv = k.view(), vv = v.view();  // views of a Buffer allocate
  const auto checks = [&] {
    c.md.validate(spec.num_blocks, spec.block_size);
    check_plan_args(c.params, c.md, spec);
    check_run_tensors(c.params, spec, c.md.num_tokens, q, out);
    check_slot_mapping(c.md.slot_mapping, int64_t(spec.num_blocks) * spec.block_size);
    c.cache->write(kv, vv, c.md);
  };
  checks();  // warm-up: the thread's slot-sorting buffer, the write's thread team
  EXPECT_EQ(allocations_of(checks), 0) << c.spec.describe();
}

// The counter sees a failing check: its message is built then.
TEST(ValidationAllocations, FailingCheckBuildsItsMessage) {
  Case c = make_case(mixed_step(), "cpu_flash");
  const KVCacheSpec& spec = c.cache->spec();
  BatchMetadata md = c.md;
  md.block_table.back() = spec.num_blocks;  // out of range, in a block the last sequence reads
  const int64_t n = allocations_of([&] { EXPECT_THROW(md.validate(spec.num_blocks, spec.block_size), Error); });
  EXPECT_GT(n, 0);
}

}  // namespace
}  // namespace attn::test
