#include "backends/cpu_blocksparse/blocksparse_forward.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "attn/error.hpp"
#include "kernels/gather/attend_tiles.hpp"
#include "kernels/gather/mla_forward.hpp"
#include "cpu/threads.hpp"

namespace attn::blocksparse {

int64_t visible_keys(const Pattern& p, int64_t pos) {
  const int64_t qb = pos / p.block_size;
  int64_t n = 0;
  for (int64_t kb = 0; kb <= qb; ++kb)
    if (p.allows(qb, kb)) n += kb == qb ? pos - qb * p.block_size + 1 : p.block_size;
  return n;
}

mla::TilePlan plan_tiles(const Shape& shape, const Pattern& pattern, const BatchMetadata& md) {
  const int H = shape.num_heads, Hkv = shape.num_kv_heads, D = shape.head_size, T = md.num_tokens, group = H / Hkv;
  ATTN_REQUIRE(pattern.block_size > 0 && pattern.local_blocks > 0 && pattern.vert_stride > 0, "block-sparse pattern",
          std::to_string(pattern.block_size) + "/" + std::to_string(pattern.local_blocks) + "/" +
              std::to_string(pattern.vert_stride),
          "bs_block_size, bs_local_blocks, bs_vert_stride all > 0");
  ATTN_REQUIRE(md.causal, "metadata.causal", "false", "true (the block-sparse pattern is causal)");
  // A tile's rows share one key list: (token, q head of one KV group) when every head has the
  // same pattern, (token) of one q head when the pattern differs per head. Rows must be
  // contiguous for the kernel, so the run regroups q to [unit][token][row_heads][D].
  const bool per_head = pattern.per_head();
  const int row_heads = per_head ? 1 : group;
  const int units = per_head ? H : Hkv;
  ATTN_REQUIRE(units < (1 << 20), "num_heads", units, "< 2^20");
  auto kv_head_of = [&](int unit) { return per_head ? unit / group : unit; };
  const int tile_tokens = std::max(1, 32 / row_heads);
  mla::TilePlan plan;
  std::vector<int64_t> positions;
  for (int s = 0; s < md.num_seqs; ++s) {
    const int q0 = md.query_start_loc[s], ql = md.query_len(s), ctx = md.context_len(s);
    int i = 0;
    while (i < ql) {
      // A tile: consecutive tokens in one sparse query block share one key-block list.
      const int64_t qb = (ctx + i) / pattern.block_size;
      int n = 1;
      while (n < tile_tokens && i + n < ql && (ctx + i + n) / pattern.block_size == qb) ++n;
      const int64_t last = ctx + i + n - 1;
      int64_t list = 0, visible = 0;
      int num_keys = 0;
      for (int u = 0; u < units; ++u) {
        if (u == 0 || per_head) {
          list = int64_t(plan.slots.size());
          positions.clear();
          for (int64_t kb = 0; kb <= qb; ++kb) {
            if (!pattern.allows(qb, kb, u)) continue;  // masked blocks are never listed, never read
            const int64_t end = std::min<int64_t>((kb + 1) * pattern.block_size, last + 1);
            for (int64_t p = kb * pattern.block_size; p < end; ++p) {
              plan.slots.push_back(mla::slot_of(md, s, p));
              positions.push_back(p);
            }
          }
          num_keys = int(positions.size());
          visible = int64_t(plan.visible.size());
          for (int j = 0; j < n; ++j) {
            const int32_t v = int32_t(std::upper_bound(positions.begin(), positions.end(), int64_t(ctx + i + j)) - positions.begin());
            plan.visible.insert(plan.visible.end(), row_heads, v);
          }
        }
        mla::Tile tile;
        tile.q_offset = (int64_t(u) * T + q0 + i) * row_heads * D;
        tile.rows = n * row_heads;
        tile.slots_offset = list;
        tile.num_keys = num_keys;
        tile.visible_offset = visible;
        tile.kv_head = kv_head_of(u);
        tile.out_index = (int64_t(q0 + i) << 20) | u;  // token and unit (a block of row_heads q heads)
        plan.tiles.push_back(tile);
      }
      i += n;
    }
  }
  plan.plan_tasks(cpu::team_size(shape.num_threads), shape.head_size_v);
  return plan;
}

std::size_t workspace_bytes(const Shape& shape, const mla::TilePlan& plan, int num_tokens) {
  const std::size_t q = mla::WorkspaceCarver::round(std::size_t(num_tokens) * shape.num_heads * shape.head_size * sizeof(float));
  return 2 * q + plan.run_bytes();  // scaled q, regrouped q, the run's buffers
}

void forward(const Shape& shape, const Pattern& pattern, const mla::TilePlan& plan, const TensorView& q,
             const KVCache& cache, const BatchMetadata& md, const TensorView& out, void* workspace) {
  const int H = shape.num_heads, Hkv = shape.num_kv_heads, D = shape.head_size, Dv = shape.head_size_v;
  const int T = md.num_tokens, group = H / Hkv;
  // Rows are read contiguously (token_stride apart): the pair-ordered layout is not served.
  ATTN_REQUIRE(cache.spec().layout == KVLayout::NHD || cache.spec().layout == KVLayout::HND, "cache.layout",
          to_string(cache.spec().layout), "NHD or HND (cpu_blocksparse)");
  if (T == 0) return;
  const int threads = cpu::team_size(shape.num_threads);
  const PagedKV kv = cache.view();
  mla::WorkspaceCarver carve{static_cast<char*>(workspace)};
  float* qf = carve.take<float>(std::size_t(T) * H * D);
  float* qg = carve.take<float>(std::size_t(T) * H * D);
  mla::scaled_q(q, H, D, shape.scale, threads, qf);
  const int row_heads = pattern.per_head() ? 1 : group;
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h)
      std::copy_n(qf + (size_t(t) * H + h) * D, D, qg + ((size_t(h / row_heads) * T + t) * row_heads + h % row_heads) * D);

  mla::TileRun run;
  run.kv = &kv;
  run.width = D;
  run.rank = Dv;
  run.k_scales = kv.k_scales;  // per KV head (null: unscaled)
  run.v_scales = kv.v_scales;
  run.q = qg;
  run.slots = plan.slots.data();
  run.q_mul = shape.scale * float(M_LOG2E);  // as scaled_q applied it: bf16 q stays exact for the dot kernels
  run.num_threads = threads;
  run.buffers = carve.next;
  run.out = &out;
  run.row_heads = row_heads;
  mla::run_tiles(run, plan);
}

}  // namespace attn::blocksparse
