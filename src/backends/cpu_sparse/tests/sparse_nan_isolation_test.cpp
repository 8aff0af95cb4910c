// NaN isolation for cpu_sparse (top-k): NaN / Inf planted in keys a query row must not attend
// (listed future positions, unlisted positions, the unused slots of the last block) leave that
// row's output bit for bit as with finite values.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "attn/attn.hpp"
#include "support/plant_nonfinite.hpp"
#include "support/mla_reference.hpp"

namespace attn::test {
namespace {

TEST(CpuSparseNan, UnselectedAndFutureKeysContributeNothing) {
  const uint64_t seed = fresh_seed();
  for (int heads : {4, 16, 20}) {
    for (KVCacheDType kv : {KVCacheDType::auto_, KVCacheDType::fp8_e4m3}) {
      for (DType io : {DType::bfloat16, DType::float32}) {
        const MlaCaseSpec spec = mla_spec("cpu_sparse", heads, io, kv, seed, {{50, 13}, {0, 29}, {90, 4}});
        MlaCase c = make_mla_case(spec);
        // Every token lists its sequence's last position: a future key for all but the last token.
        std::vector<std::set<int>> listed(c.md.num_seqs);
        for (int s = 0; s < c.md.num_seqs; ++s) {
          for (int t = c.md.query_start_loc[s]; t < c.md.query_start_loc[s + 1]; ++t) {
            c.topk[size_t(t) * spec.topk + spec.topk - 1] = c.md.seq_lens[s] - 1;
            for (int k = 0; k < spec.topk; ++k) listed[s].insert(c.topk[size_t(t) * spec.topk + k]);
          }
        }
        run_mla_forward(c);
        const std::vector<double> finite = tensor_values(c.out);
        for (int s = 0; s < c.md.num_seqs; ++s) {
          plant_nonfinite(*c.cache, c.md, s, c.md.seq_lens[s] - 1, s % 2 == 0);
          plant_in_tail_slots(*c.cache, c.md, s, s % 2 == 1);
          for (int p = 0; p < c.md.seq_lens[s]; ++p)
            if (!listed[s].count(p)) plant_nonfinite(*c.cache, c.md, s, p, p % 2 == 0);
        }
        run_mla_forward(c);
        const std::vector<double> got = tensor_values(c.out);
        for (int s = 0; s < c.md.num_seqs; ++s)
          for (int t = c.md.query_start_loc[s]; t + 1 < c.md.query_start_loc[s + 1]; ++t)
            expect_rows_equal(got, finite, t, size_t(heads) * spec.rank, spec.describe());
      }
    }
  }
}

}  // namespace
}  // namespace attn::test
