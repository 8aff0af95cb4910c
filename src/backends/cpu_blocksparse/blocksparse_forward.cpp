#include "backends/cpu_blocksparse/blocksparse_forward.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "attn/error.hpp"
#include "kernels/latent/attend_tiles.hpp"
#include "kernels/latent/mla_forward.hpp"
#include "cpu/threads.hpp"

namespace attn::blocksparse {

int64_t visible_keys(const Pattern& p, int64_t pos) {
  const int64_t qb = pos / p.block_size;
  int64_t n = 0;
  for (int64_t kb = 0; kb <= qb; ++kb)
    if (p.allows(qb, kb)) n += kb == qb ? pos - qb * p.block_size + 1 : p.block_size;
  return n;
}

void forward(const Shape& shape, const Pattern& pattern, const TensorView& q, const KVCache& cache,
             const BatchMetadata& md, const TensorView& out) {
  const int H = shape.num_heads, Hkv = shape.num_kv_heads, D = shape.head_size, Dv = shape.head_size_v;
  const int T = md.num_tokens, group = H / Hkv;
  require(pattern.block_size > 0 && pattern.local_blocks > 0 && pattern.vert_stride > 0, "block-sparse pattern",
          std::to_string(pattern.block_size) + "/" + std::to_string(pattern.local_blocks) + "/" +
              std::to_string(pattern.vert_stride),
          "bs_block_size, bs_local_blocks, bs_vert_stride all > 0");
  require(md.causal, "metadata.causal", "false", "true (the block-sparse pattern is causal)");
  // Rows are read contiguously (token_stride apart): the pair-ordered layout is not served.
  require(cache.spec().layout == KVLayout::NHD || cache.spec().layout == KVLayout::HND, "cache.layout",
          to_string(cache.spec().layout), "NHD or HND (cpu_blocksparse)");
  if (T == 0) return;
  const int threads = cpu::team_size(shape.num_threads);
  const PagedKV kv = cache.view();
  const std::vector<float> qf = mla::scaled_q(q, H, D, shape.scale, threads);
  // A tile's rows share one key list: (token, q head of one KV group) when every head has the
  // same pattern, (token) of one q head when the pattern differs per head. Rows must be
  // contiguous for the kernel, so q is regrouped to [unit][token][row_heads][D].
  const bool per_head = pattern.per_head();
  const int row_heads = per_head ? 1 : group;
  const int units = per_head ? H : Hkv;
  auto kv_head_of = [&](int unit) { return per_head ? unit / group : unit; };
  std::vector<float> qg(qf.size());
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h)
      std::copy_n(qf.data() + (size_t(t) * H + h) * D, D,
                  qg.data() + ((size_t(h / row_heads) * T + t) * row_heads + h % row_heads) * D);

  const int tile_tokens = std::max(1, 32 / row_heads);
  std::vector<std::vector<int64_t>> lists;
  std::vector<mla::Tile> tiles;
  for (int s = 0; s < md.num_seqs; ++s) {
    const int q0 = md.query_start_loc[s], ql = md.query_len(s), ctx = md.context_len(s);
    int i = 0;
    while (i < ql) {
      // A tile: consecutive tokens in one sparse query block share one key-block list.
      const int64_t qb = (ctx + i) / pattern.block_size;
      int n = 1;
      while (n < tile_tokens && i + n < ql && (ctx + i + n) / pattern.block_size == qb) ++n;
      const int64_t last = ctx + i + n - 1;
      std::vector<int32_t> visible;
      for (int u = 0; u < units; ++u) {
        if (u == 0 || per_head) {
          std::vector<int64_t> slots;
          std::vector<int64_t> positions;
          for (int64_t kb = 0; kb <= qb; ++kb) {
            if (!pattern.allows(qb, kb, u)) continue;  // masked blocks are never listed, never read
            const int64_t end = std::min<int64_t>((kb + 1) * pattern.block_size, last + 1);
            for (int64_t p = kb * pattern.block_size; p < end; ++p) {
              slots.push_back(mla::slot_of(md, s, p));
              positions.push_back(p);
            }
          }
          visible.clear();
          for (int j = 0; j < n; ++j) {
            const int32_t v = int32_t(std::upper_bound(positions.begin(), positions.end(), int64_t(ctx + i + j)) - positions.begin());
            visible.insert(visible.end(), row_heads, v);
          }
          lists.push_back(std::move(slots));
        }
        mla::Tile tile;
        tile.q = qg.data() + (size_t(u) * T + q0 + i) * row_heads * D;
        tile.rows = n * row_heads;
        tile.slots = lists.back().data();
        tile.num_keys = int(lists.back().size());
        tile.visible = visible;
        tile.k_offset = kv_head_of(u) * kv.head_stride;
        tile.v_offset = kv_head_of(u) * kv.head_stride + kv.v_offset;
        tile.out_index = (int64_t(q0 + i) << 20) | u;  // token and unit, unpacked in out_row
        tiles.push_back(std::move(tile));
      }
      i += n;
    }
  }
  require(units < (1 << 20), "num_heads", units, "< 2^20");

  mla::TileRun run;
  run.kv = &kv;
  run.width = D;
  run.rank = Dv;
  run.q_mul = shape.scale * float(M_LOG2E);  // as scaled_q applied it: bf16 q stays exact for the dot kernels
  run.num_threads = threads;
  run.out_dtype = out.dtype;
  const size_t osz = dtype_size(out.dtype);
  run.out_row = [&](int64_t index, int r) -> void* {
    const int64_t tok = (index >> 20) + r / row_heads, head = (index & ((1 << 20) - 1)) * row_heads + r % row_heads;
    return static_cast<uint8_t*>(out.data) + (tok * out.strides[0] + head * out.strides[1]) * osz;
  };
  // Per-head scales differ by KV head: run each head's tiles with its own scales.
  const bool per_head_scales = kv.k_scales && Hkv > 1 &&
                        (std::any_of(kv.k_scales, kv.k_scales + Hkv, [&](float x) { return x != kv.k_scales[0]; }) ||
                         std::any_of(kv.v_scales, kv.v_scales + Hkv, [&](float x) { return x != kv.v_scales[0]; }));
  if (!per_head_scales) {
    run.k_scale = kv.k_scales ? kv.k_scales[0] : 1.0f;
    run.v_scale = kv.v_scales ? kv.v_scales[0] : 1.0f;
    mla::run_tiles(run, tiles);
    return;
  }
  for (int g = 0; g < Hkv; ++g) {
    std::vector<mla::Tile> mine;
    for (const mla::Tile& t : tiles)
      if (kv_head_of(int(t.out_index & ((1 << 20) - 1))) == g) mine.push_back(t);
    run.k_scale = kv.k_scales[g];
    run.v_scale = kv.v_scales[g];
    mla::run_tiles(run, mine);
  }
}

}  // namespace attn::blocksparse
