#include "kernels/latent/mla_forward.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "attn/error.hpp"
#include "attn/numeric.hpp"
#include "kernels/latent/attend_tiles.hpp"
#include "kernels/latent/mla_kernel.hpp"
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
  require(spec.layout == KVLayout::MLA, "cache.layout", to_string(spec.layout), "MLA");
  require(spec.num_kv_heads == 1, "cache.num_kv_heads", spec.num_kv_heads, "1 (the latent entry is shared by all heads)");
  require(spec.head_size == shape.width(), "cache.head_size", spec.head_size,
          std::to_string(shape.width()) + " (kv_lora_rank + qk_rope_head_dim)");
  require(spec.v_width() == shape.rank, "cache.head_size_v", spec.v_width(), std::to_string(shape.rank) + " (kv_lora_rank)");
  require(md.block_size == spec.block_size, "metadata.block_size", md.block_size,
          "the cache's block size " + std::to_string(spec.block_size));
  md.validate(spec.num_blocks, spec.block_size);
}

namespace {
// Rows per dense tile: enough heads × tokens that each converted chunk is reused many times, few
// enough that the fp32 accumulators (rows × rank) stay in L2.
int tile_tokens(int heads) { return std::max(1, 32 / heads); }
}  // namespace

std::vector<float> scaled_q(const TensorView& q, int heads, int width, float scale, int threads) {
  const int T = int(q.size(0));
  std::vector<float> qf(size_t(T) * heads * width);
  const float qmul = scale * float(M_LOG2E);  // the kernel works in base 2
  const size_t esz = dtype_size(q.dtype);
  // A decode step's q is a few hundred KiB at most: forking threads for it costs more than it
  // saves (and on a loaded machine every fork/join waits for a descheduled thread).
#pragma omp parallel for num_threads(threads) schedule(static) if (size_t(T) * heads * width >= (size_t(1) << 20))
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < heads; ++h) {
      const auto* row = static_cast<const uint8_t*>(q.data) + (t * q.strides[0] + h * q.strides[1]) * esz;
      float* dst = qf.data() + (size_t(t) * heads + h) * width;
      for (int d = 0; d < width; ++d) dst[d] = read_elem(row, q.dtype, d) * qmul;
    }
  }
  return qf;
}

void absorbed_forward(const MlaShape& shape, const TensorView& q, const KVCache& cache, const BatchMetadata& md,
                      const TensorView& out, const TensorView* topk) {
  const int H = shape.num_heads, W = shape.width(), R = shape.rank;
  const int T = md.num_tokens;
  check_tensor(q, "q", 3, {DType::float32, DType::float16, DType::bfloat16}, {T, H, W});
  check_tensor(out, "out", 3, {DType::float32, DType::float16, DType::bfloat16}, {T, H, R});
  check_mla_cache(shape, cache, md);
  const int K = topk ? int(topk->size(1)) : 0;
  if (topk) {
    check_tensor(*topk, "topk_indices", 2, {DType::int32}, {T, -1}, false);
    require(K > 0, "topk_indices.shape[1]", K, "at least 1");
  }
  if (T == 0) return;

  const int threads = cpu::team_size(shape.num_threads);
  const PagedKV kv = cache.view();
  const std::vector<float> qf = scaled_q(q, H, W, shape.scale, threads);

  // Key lists: dense → one per sequence (its tiles use prefixes); sparse → one per token.
  std::vector<std::vector<int64_t>> lists;
  lists.reserve(topk ? T : md.num_seqs);
  std::vector<Tile> tiles;
  for (int s = 0; s < md.num_seqs; ++s) {
    const int q0 = md.query_start_loc[s], ql = md.query_len(s), sl = md.seq_lens[s], ctx = sl - ql;
    if (!topk) {
      std::vector<int64_t> slots(sl);
      for (int p = 0; p < sl; ++p) slots[p] = slot_of(md, s, p);
      lists.push_back(std::move(slots));
      const int tt = tile_tokens(H);
      for (int i = 0; i < ql; i += tt) {
        Tile tile;
        const int n = std::min(tt, ql - i);
        tile.q = qf.data() + size_t(q0 + i) * H * W;
        tile.rows = n * H;
        tile.slots = lists.back().data();
        tile.num_keys = md.causal ? ctx + i + n : sl;
        for (int j = 0; j < n; ++j) tile.visible.insert(tile.visible.end(), H, md.causal ? ctx + i + j + 1 : sl);
        tile.out_index = q0 + i;
        tiles.push_back(std::move(tile));
      }
      continue;
    }
    for (int i = 0; i < ql; ++i) {
      const int t = q0 + i, pos = ctx + i;
      const int32_t* idx = topk->ptr<const int32_t>() + int64_t(t) * topk->strides[0];
      std::vector<int64_t> slots;
      slots.reserve(K);
      for (int k = 0; k < K; ++k) {
        const int32_t p = idx[k * topk->strides[1]];
        if (p == -1) continue;
        require(p >= 0 && p < sl, "topk_indices[" + std::to_string(t) + "][" + std::to_string(k) + "]", p,
                "-1 or a position in [0, " + std::to_string(sl) + ") of sequence " + std::to_string(s));
        if (md.causal && p > pos) continue;  // the future is never attended
        slots.push_back(slot_of(md, s, p));
      }
      lists.push_back(std::move(slots));
      Tile tile;
      tile.q = qf.data() + size_t(t) * H * W;
      tile.rows = H;
      tile.slots = lists.back().data();
      tile.num_keys = int(lists.back().size());
      tile.visible.assign(H, tile.num_keys);
      tile.out_index = t;
      tiles.push_back(std::move(tile));
    }
  }

  TileRun run;
  run.kv = &kv;
  run.width = W;
  run.rank = R;
  // One scale: K and V share the entry (fp8_ds_mla entries carry their own tile scales).
  run.k_scale = run.v_scale = kv.k_scales && !kv.ds_mla ? kv.k_scales[0] : 1.0f;
  run.q_mul = shape.scale * float(M_LOG2E);  // as scaled_q applied it
  run.num_threads = threads;
  run.out_dtype = out.dtype;
  const size_t osz = dtype_size(out.dtype);
  run.out_row = [&](int64_t tok0, int r) -> void* {
    return static_cast<uint8_t*>(out.data) + ((tok0 + r / H) * out.strides[0] + (r % H) * out.strides[1]) * osz;
  };
  run_tiles(run, tiles);
}

}  // namespace attn::mla
