// NaN isolation for cpu_mla: NaN / Inf planted in keys a query row must not see (a future key
// of the same prefill chunk, i.e. inside the same key tile as its visible keys, and the unused
// slots of the last block) leave that row's output bit for bit as with finite values, under
// every attend kernel this CPU runs.
#include <gtest/gtest.h>

#include <cmath>

#include "attn/attn.hpp"
#include "kernels/gather/mla_kernel.hpp"
#include "support/plant_nonfinite.hpp"
#include "support/cpu_isa_env.hpp"
#include "support/mla_reference.hpp"

namespace attn::test {
namespace {

/// Runs the case, plants non-finite values in every sequence's last position and tail slots,
/// runs it again and compares the rows that cannot see the last position.
void expect_isolated(const MlaCaseSpec& spec) {
  MlaCase c = make_mla_case(spec);
  run_mla_forward(c);
  const std::vector<double> finite = tensor_values(c.out);
  for (int s = 0; s < c.md.num_seqs; ++s) {
    plant_nonfinite(*c.cache, c.md, s, c.md.seq_lens[s] - 1, s % 2 == 1);
    plant_in_tail_slots(*c.cache, c.md, s, s % 2 == 0);
  }
  run_mla_forward(c);
  const std::vector<double> got = tensor_values(c.out);
  const size_t row = size_t(spec.num_heads) * spec.rank;
  int checked = 0;
  for (int s = 0; s < c.md.num_seqs; ++s) {
    // The last query token sees the last position; every earlier one must be untouched.
    for (int t = c.md.query_start_loc[s]; t + 1 < c.md.query_start_loc[s + 1]; ++t, ++checked) {
      for (size_t i = t * row; i < (t + 1) * row; ++i) {
        ASSERT_TRUE(std::isfinite(got[i])) << spec.describe() << " token " << t << " element " << i - t * row;
        ASSERT_EQ(got[i], finite[i]) << spec.describe() << " token " << t << " element " << i - t * row;
      }
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(CpuMlaNan, MaskedKeysInTheSameTileContributeNothing) {
  const uint64_t seed = fresh_seed();
  for_each_cpu_isa(family_isas_here({mla::Isa::amx, mla::Isa::avx512_bf16, mla::Isa::avx512, mla::Isa::generic}), [&](mla::Isa) {
    // 4 heads: one lane block holds several tokens (ragged limits inside a vector); 16 and 20:
    // one or one and a bit lane blocks per token.
    for (int heads : {4, 16, 20}) {
      for (KVCacheDType kv : {KVCacheDType::auto_, KVCacheDType::fp8_e4m3, KVCacheDType::fp8_e5m2}) {
        for (DType io : {DType::bfloat16, DType::float32}) {
          // chunked prefills whose last key shares a 16/32/64-key chunk with visible keys,
          // a fresh prefill and a long one that splits over threads (16-token blocks)
          MlaCaseSpec spec = mla_spec("cpu_mla", heads, io, kv, seed, {{50, 13}, {0, 29}, {37, 2}, {300, 3}});
          spec.num_threads = 2;
          expect_isolated(spec);
        }
      }
    }
  });
}

}  // namespace
}  // namespace attn::test
