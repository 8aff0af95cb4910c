// NaN isolation for cpu_blocksparse: NaN / Inf planted in keys a query row must not attend
// (masked sparse blocks, future positions, the unused slots of the last block) leave that row's
// output bit for bit as with finite values.
#include <gtest/gtest.h>

#include <cmath>

#include "attn/attn.hpp"
#include "backends/cpu_blocksparse/blocksparse_pattern.hpp"
#include "backends/cpu_blocksparse/tests/blocksparse_case.hpp"
#include "support/plant_nonfinite.hpp"
#include "support/test_support.hpp"

namespace attn::test {
namespace {

TEST(CpuBlockSparseNan, MaskedBlocksAndFutureKeysContributeNothing) {
  const uint64_t seed = fresh_seed();
  for (int kv_heads : {1, 2}) {
    for (KVCacheDType kv : {KVCacheDType::auto_, KVCacheDType::bfloat16, KVCacheDType::fp8_e5m2}) {
      for (DType io : {DType::bfloat16, DType::float32}) {
        CaseSpec spec = blocksparse_case(io, kv, seed, kv_heads);
        const LayerConfig& cfg = spec.config;
        spec.seqs = {{0, 77}, {41, 19}, {130, 3}};
        const blocksparse::Pattern pat{cfg.bs_block_size, cfg.bs_local_blocks, cfg.bs_vert_stride};
        Case c = make_case(spec, "cpu_blocksparse");
        run_forward(c);
        const std::vector<double> finite = output_values(c);
        // Planted: the last position (a future key inside the last tile) and every block the last
        // token's pattern masks; rows that see none of them are compared.
        std::vector<std::vector<int>> planted(c.md.num_seqs);
        for (int s = 0; s < c.md.num_seqs; ++s) {
          const int len = c.md.seq_lens[s], qb = (len - 1) / pat.block_size;
          for (int p = 0; p < len; ++p)
            if (p == len - 1 || !pat.allows(qb, p / pat.block_size)) planted[s].push_back(p);
          for (size_t i = 0; i < planted[s].size(); ++i) plant_nonfinite(*c.cache, c.md, s, planted[s][i], i % 2 == 0);
          plant_in_tail_slots(*c.cache, c.md, s, s % 2 == 0);
        }
        run_forward(c);
        const std::vector<double> got = output_values(c);
        int checked = 0;
        for (int s = 0; s < c.md.num_seqs; ++s) {
          for (int i = 0; i < c.md.query_len(s); ++i) {
            const int pos = c.md.context_len(s) + i;
            bool sees = false;
            for (int p : planted[s]) sees |= p <= pos && pat.allows(pos / pat.block_size, p / pat.block_size);
            if (sees) continue;
            ++checked;
            expect_rows_equal(got, finite, c.md.query_start_loc[s] + i, size_t(cfg.num_heads) * cfg.head_size, spec.describe());
          }
        }
        EXPECT_GE(checked, 10) << spec.describe();
      }
    }
  }
}

}  // namespace
}  // namespace attn::test
