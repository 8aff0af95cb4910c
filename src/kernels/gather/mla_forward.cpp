#include "kernels/gather/mla_forward.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "attn/error.hpp"
#include "attn/numeric.hpp"
#include "kernels/gather/attend_tiles.hpp"
#include "kernels/gather/mla_kernel.hpp"
#include "cpu/threads.hpp"

namespace attn::mla {

float read_elem(const void* row, DType dtype, int i) {
  switch (dtype) {
    case DType::float32: return static_cast<const float*>(row)[i];
    case DType::bfloat16: return bf16_to_f32(static_cast<const uint16_t*>(row)[i]);
    default: return load_as_float(row, dtype, i);
  }
}

void write_row(void* row, DType dtype, const float* src, int n, float mul) {
  switch (dtype) {
    case DType::float32:
      for (int i = 0; i < n; ++i) static_cast<float*>(row)[i] = src[i] * mul;
      break;
    case DType::bfloat16:
      for (int i = 0; i < n; ++i) static_cast<uint16_t*>(row)[i] = f32_to_bf16(src[i] * mul);
      break;
    default:
      for (int i = 0; i < n; ++i) store_from_float(row, dtype, i, src[i] * mul);
  }
}

void check_mla_cache(const MlaShape& shape, const KVCache& cache, const BatchMetadata& md) {
  const KVCacheSpec& spec = cache.spec();
  ATTN_REQUIRE(spec.layout == KVLayout::MLA, "cache.layout", to_string(spec.layout), "MLA");
  ATTN_REQUIRE(spec.num_kv_heads == 1, "cache.num_kv_heads", spec.num_kv_heads, "1 (the latent entry is shared by all heads)");
  ATTN_REQUIRE(spec.head_size == shape.width(), "cache.head_size", spec.head_size,
          std::to_string(shape.width()) + " (kv_lora_rank + qk_rope_head_dim)");
  ATTN_REQUIRE(spec.v_width() == shape.rank, "cache.head_size_v", spec.v_width(), std::to_string(shape.rank) + " (kv_lora_rank)");
  ATTN_REQUIRE(md.block_size == spec.block_size, "metadata.block_size", md.block_size,
          "the cache's block size " + std::to_string(spec.block_size));
  // The metadata itself was validated against this cache geometry once, by the step's plan.
}

namespace {
// Rows per dense tile: enough heads × tokens that each converted chunk is reused many times, few
// enough that the fp32 accumulators (rows × rank) stay in L2.
int tile_tokens(int heads) { return std::max(1, 32 / heads); }
}  // namespace

void scaled_q(const TensorView& q, int heads, int width, float scale, int threads, float* qf) {
  const int T = int(q.size(0));
  const float qmul = scale * float(M_LOG2E);  // the kernel works in base 2
  const size_t esz = dtype_size(q.dtype);
  // A decode step's q is a few hundred KiB at most: forking threads for it costs more than it
  // saves (and on a loaded machine every fork/join waits for a descheduled thread).
#pragma omp parallel for num_threads(threads) schedule(static) if (size_t(T) * heads * width >= (size_t(1) << 20))
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < heads; ++h) {
      const auto* row = static_cast<const uint8_t*>(q.data) + (t * q.strides[0] + h * q.strides[1]) * esz;
      float* dst = qf + (size_t(t) * heads + h) * width;
      for (int d = 0; d < width; ++d) dst[d] = read_elem(row, q.dtype, d) * qmul;
    }
  }
}

TilePlan plan_absorbed(const MlaShape& shape, const BatchMetadata& md, int topk) {
  const int H = shape.num_heads, W = shape.width();
  TilePlan plan;
  for (int s = 0; s < md.num_seqs; ++s) {
    const int q0 = md.query_start_loc[s], ql = md.query_len(s), sl = md.seq_lens[s], ctx = sl - ql;
    if (topk > 0) {  // one tile per token (tile i is token i), its list made by the run
      for (int i = 0; i < ql; ++i) {
        Tile tile;
        tile.q_offset = int64_t(q0 + i) * H * W;
        tile.rows = H;
        tile.num_keys = topk;
        tile.out_index = int64_t(q0 + i) << 20;
        plan.tiles.push_back(tile);
      }
      continue;
    }
    // Dense: the sequence's slots once; its tiles read prefixes of them.
    const int64_t list = int64_t(plan.slots.size());
    for (int p = 0; p < sl; ++p) plan.slots.push_back(slot_of(md, s, p));
    const int tt = tile_tokens(H);
    for (int i = 0; i < ql; i += tt) {
      Tile tile;
      const int n = std::min(tt, ql - i);
      tile.q_offset = int64_t(q0 + i) * H * W;
      tile.rows = n * H;
      tile.slots_offset = list;
      tile.num_keys = md.causal ? ctx + i + n : sl;
      tile.visible_offset = int64_t(plan.visible.size());
      for (int j = 0; j < n; ++j) plan.visible.insert(plan.visible.end(), H, md.causal ? ctx + i + j + 1 : sl);
      tile.out_index = int64_t(q0 + i) << 20;
      plan.tiles.push_back(tile);
    }
  }
  plan.plan_tasks(cpu::team_size(shape.num_threads), shape.rank);
  return plan;
}

std::size_t absorbed_workspace_bytes(const MlaShape& shape, const TilePlan& plan, int num_tokens, int topk) {
  std::size_t bytes = WorkspaceCarver::round(std::size_t(num_tokens) * shape.num_heads * shape.width() * sizeof(float));
  if (topk > 0)
    bytes += WorkspaceCarver::round(std::size_t(num_tokens) * topk * sizeof(int64_t)) +
             WorkspaceCarver::round(plan.tiles.size() * sizeof(int32_t));
  return bytes + plan.run_bytes();
}

void absorbed_forward(const MlaShape& shape, const TilePlan& plan, const TensorView& q, const KVCache& cache,
                      const BatchMetadata& md, const TensorView& out, const TensorView* topk, void* workspace) {
  const int H = shape.num_heads, W = shape.width(), R = shape.rank;
  const int T = md.num_tokens;
  check_tensor(q, "q", 3, {DType::float32, DType::float16, DType::bfloat16}, {T, H, W});
  check_tensor(out, "out", 3, {DType::float32, DType::float16, DType::bfloat16}, {T, H, R});
  check_mla_cache(shape, cache, md);
  const int K = topk ? int(topk->size(1)) : 0;
  if (topk) {
    check_tensor(*topk, "topk_indices", 2, {DType::int32}, {T, -1}, false);
    ATTN_REQUIRE(K > 0, "topk_indices.shape[1]", K, "at least 1");
  }
  if (T == 0) return;

  const int threads = cpu::team_size(shape.num_threads);
  const PagedKV kv = cache.view();
  WorkspaceCarver carve{static_cast<char*>(workspace)};
  float* qf = carve.take<float>(std::size_t(T) * H * W);
  scaled_q(q, H, W, shape.scale, threads, qf);
  TileRun run;
  run.slots = plan.slots.data();
  if (topk) {  // each token's list: its visible top-k positions as slots, in the order given
    int64_t* slots = carve.take<int64_t>(std::size_t(T) * K);
    int32_t* counts = carve.take<int32_t>(plan.tiles.size());
    for (int s = 0; s < md.num_seqs; ++s) {
      const int q0 = md.query_start_loc[s], ql = md.query_len(s), sl = md.seq_lens[s], ctx = sl - ql;
      for (int i = 0; i < ql; ++i) {
        const int t = q0 + i, pos = ctx + i;
        const int32_t* idx = topk->ptr<const int32_t>() + int64_t(t) * topk->strides[0];
        int64_t* list = slots + int64_t(t) * K;
        int n = 0;
        for (int k = 0; k < K; ++k) {
          const int32_t p = idx[k * topk->strides[1]];
          if (p == -1) continue;
          ATTN_REQUIRE(p >= 0 && p < sl, "topk_indices[" + std::to_string(t) + "][" + std::to_string(k) + "]", p,
                       "-1 or a position in [0, " + std::to_string(sl) + ") of sequence " + std::to_string(s));
          if (md.causal && p > pos) continue;  // the future is never attended
          list[n++] = slot_of(md, s, p);
        }
        counts[t] = n;  // tiles are the tokens, in order
      }
    }
    run.slots = slots;
    run.list_stride = K;
    run.num_keys = counts;
  }
  run.kv = &kv;
  run.width = W;
  run.rank = R;
  // One scale: K and V share the entry (fp8_ds_mla entries carry their own tile scales).
  const float scale = kv.k_scales && !kv.ds_mla ? kv.k_scales[0] : 1.0f;
  run.k_scales = run.v_scales = &scale;
  run.q = qf;
  run.q_mul = shape.scale * float(M_LOG2E);  // as scaled_q applied it
  run.num_threads = threads;
  run.buffers = carve.next;
  run.out = &out;
  run.row_heads = H;
  run_tiles(run, plan);
}

}  // namespace attn::mla
