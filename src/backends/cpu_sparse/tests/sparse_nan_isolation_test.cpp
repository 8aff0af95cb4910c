// NaN isolation for cpu_sparse (top-k) and cpu_blocksparse: NaN / Inf planted in keys a query
// row must not attend (listed future positions, unlisted positions, masked sparse blocks, the
// unused slots of the last block) leave that row's output bit for bit as with finite values.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "attn/attn.hpp"
#include "backends/cpu_mla/tests/plant_nonfinite.hpp"
#include "backends/cpu_sparse/blocksparse_pattern.hpp"
#include "support/mla_reference.hpp"

namespace attn::test {
namespace {

void expect_rows_equal(const std::vector<double>& got, const std::vector<double>& finite, int t, size_t row,
                       const std::string& what) {
  for (size_t i = t * row; i < (t + 1) * row; ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << " token " << t << " element " << i - t * row;
    ASSERT_EQ(got[i], finite[i]) << what << " token " << t << " element " << i - t * row;
  }
}

TEST(CpuSparseNan, UnselectedAndFutureKeysContributeNothing) {
  const uint64_t seed = fresh_seed();
  for (int heads : {4, 16, 20}) {
    for (KVCacheDType kv : {KVCacheDType::auto_, KVCacheDType::fp8_e4m3}) {
      for (DType io : {DType::bfloat16, DType::float32}) {
        MlaCaseSpec spec;
        spec.backend = "cpu_sparse";
        spec.num_heads = heads;
        spec.dtype = io;
        spec.kv_cache_dtype = kv;
        spec.kv_scale = 0.05f;
        spec.seed = seed;
        spec.topk = 24;
        spec.seqs = {{50, 13}, {0, 29}, {90, 4}};
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

TEST(CpuBlockSparseNan, MaskedBlocksAndFutureKeysContributeNothing) {
  const uint64_t seed = fresh_seed();
  for (int kv_heads : {1, 2}) {
    for (KVCacheDType kv : {KVCacheDType::auto_, KVCacheDType::bfloat16, KVCacheDType::fp8_e5m2}) {
      for (DType io : {DType::bfloat16, DType::float32}) {
        CaseSpec spec;
        LayerConfig& cfg = spec.config;
        cfg.num_heads = 8;
        cfg.num_kv_heads = kv_heads;
        cfg.head_size = 64;
        cfg.dtype = io;
        cfg.kv_cache_dtype = kv;
        cfg.use_block_sparse = true;
        cfg.bs_block_size = 8;
        cfg.bs_local_blocks = 2;
        cfg.bs_vert_stride = 3;
        spec.block_size = 16;
        spec.seed = seed;
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
