// Split-KV paged decode (flash-decoding): one CTA per (KV split, KV head × head slice, sequence).
// Decode is bound by reading the cache, so the kernel is built around the loads: 32-token K/V
// tiles are streamed with cp.async into a two-stage shared-memory ring while the previous tile
// is consumed, and every K/V row is read from HBM once for all the query heads of its GQA group.
// The math (≤ 8 heads × 32 tokens per tile) runs on CUDA cores; it is far below the load time.
#include <cuda_runtime.h>

#include "device.cuh"
#include "../limits.hpp"

namespace attn::cuda_flash {

namespace {

constexpr int kThreads = 128;
constexpr int kTile = kDecodeTileTokens;
constexpr int kHeads = kMaxHeadsPerCta;

// Shared-memory row stride in bytes: the row plus 16 bytes, so that 8 lanes reading 16 bytes
// of 8 consecutive rows hit 32 distinct banks.
__host__ __device__ inline int decode_row_bytes(int head_size, int elem_bytes) { return head_size * elem_bytes + 16; }

__host__ __device__ inline int decode_smem_bytes(int head_size, int elem_bytes) {
  return kHeads * head_size * 4                                     // q (fp32)
         + 2 * 2 * kTile * decode_row_bytes(head_size, elem_bytes)  // K and V, two stages
         + kHeads * kTile * 4                                       // scores / probabilities
         + kHeads * 4 * 3;                                          // alpha, final m, final l
}

template <typename KV>
__device__ void load_tile(const AttnParams& p, const int32_t* table, int kvh, int tile_start, int seq_len,
                          char* ks, char* vs) {
  const int row_bytes = p.head_size * int(sizeof(KV));
  const int stride = decode_row_bytes(p.head_size, sizeof(KV));
  const bool wide = row_bytes % 16 == 0;
  const int chunk = wide ? 16 : 8;
  const int per_row = row_bytes / chunk;
  const char* kv = static_cast<const char*>(p.kv);
  for (int i = threadIdx.x; i < kTile * per_row; i += kThreads) {
    const int r = i / per_row, c = i % per_row;
    const int pos = tile_start + r;
    const bool valid = pos < seq_len;
    const int64_t off = valid ? kv_row_offset(p, table, pos, kvh) : 0;
    const char* kg = kv + off * int64_t(sizeof(KV)) + c * chunk;
    const char* vg = kg + p.v_offset * int64_t(sizeof(KV));
    char* kd = ks + r * stride + c * chunk;
    char* vd = vs + r * stride + c * chunk;
    if (wide) {
      cp_async16(kd, kg, valid);
      cp_async16(vd, vg, valid);
    } else {
      cp_async8(kd, kg, valid);
      cp_async8(vd, vg, valid);
    }
  }
}

template <typename T, typename KV>
__global__ void __launch_bounds__(kThreads) decode_kernel(AttnParams p) {
  extern __shared__ __align__(16) char smem[];
  const int split = blockIdx.x;
  const int slices = (p.group + p.heads_per_cta - 1) / p.heads_per_cta;
  const int kvh = blockIdx.y / slices;
  const int head0 = kvh * p.group + (blockIdx.y % slices) * p.heads_per_cta;
  const int nh = min(p.heads_per_cta, kvh * p.group + p.group - head0);
  const int seq = p.seq_list[blockIdx.z];
  const int token = p.query_start_loc[seq];  // decode: one query token
  const int seq_len = p.seq_lens[seq];
  const int qpos = seq_len - 1;
  const int D = p.head_size;
  const int32_t* table = p.block_table + int64_t(seq) * p.max_blocks_per_seq;

  float* q_s = reinterpret_cast<float*>(smem);
  char* kv_s = smem + kHeads * D * 4;
  const int stride = decode_row_bytes(D, sizeof(KV));
  const int stage_bytes = kTile * stride;
  float* s_s = reinterpret_cast<float*>(kv_s + 4 * stage_bytes);
  float* alpha_s = s_s + kHeads * kTile;
  float* m_s = alpha_s + kHeads;
  float* l_s = m_s + kHeads;

  // The split's key range, clipped to the sliding window (tiles before it are skipped).
  int lo = split * p.split_tokens;
  int hi = min(seq_len, lo + p.split_tokens);
  if (p.window > 0) lo = max(lo, (max(0, qpos - p.window + 1) / kTile) * kTile);
  const int num_tiles = hi > lo ? (hi - lo + kTile - 1) / kTile : 0;

  const float k_scale = p.k_scales[kvh];
  for (int i = threadIdx.x; i < kHeads * D; i += kThreads) {
    const int h = i / D, d = i % D;
    q_s[i] = h < nh ? Elem<T>::to_float(static_cast<const T*>(p.q)[token * p.q_stride_t + int64_t(head0 + h) * p.q_stride_h + d]) : 0.0f;
  }

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Softmax state: warp w owns heads w and w + 4 (every lane holds the same value).
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  // P·V: thread → one dim pair and a subset of the heads, so V is read from shared memory once
  // per tile for several heads.
  const int pairs = D / 2;
  const int subsets = kThreads / pairs;  // >= 1 since D <= 256
  const int pair = threadIdx.x % pairs, subset = threadIdx.x / pairs;
  const bool pv_active = subset < subsets;
  float acc[kHeads][2];
#pragma unroll
  for (int j = 0; j < kHeads; ++j) acc[j][0] = acc[j][1] = 0.0f;

  if (num_tiles > 0) {
    load_tile<KV>(p, table, kvh, lo, hi, kv_s, kv_s + stage_bytes);
    cp_async_commit();
  }
  for (int it = 0; it < num_tiles; ++it) {
    const int tile_start = lo + it * kTile;
    char* ks = kv_s + (it & 1) * 2 * stage_bytes;
    char* vs = ks + stage_bytes;
    if (it + 1 < num_tiles) {
      char* kn = kv_s + ((it + 1) & 1) * 2 * stage_bytes;
      load_tile<KV>(p, table, kvh, tile_start + kTile, hi, kn, kn + stage_bytes);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    // Q·Kᵀ: lane = token of the tile, warp = heads warp and warp + 4.
    {
      const int pos = tile_start + lane;
      const KV* krow = reinterpret_cast<const KV*>(ks + lane * stride);
      float dot[2] = {0.0f, 0.0f};
      for (int d = 0; d < D; d += 8) {
        float kf[8];
        load8_as_float<KV>(krow + d, kf);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float* qh = q_s + (warp + 4 * j) * D + d;
#pragma unroll
          for (int e = 0; e < 8; ++e) dot[j] = fmaf(qh[e], kf[e], dot[j]);
        }
      }
      const bool visible = key_visible(pos, qpos, hi, true, p.window);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float s = visible ? score_log2(dot[j] * k_scale, p.scale, p.soft_cap) : -INFINITY;
        s_s[(warp + 4 * j) * kTile + lane] = s;
      }
    }
    __syncthreads();

    // Online softmax per head, in the log2 domain.
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int h = warp + 4 * j;
      const float s = s_s[h * kTile + lane];
      const float m_new = fmaxf(m_run[j], warp_max(s));
      const float pr = exp2_diff(s, m_new);
      const float alpha = exp2_diff(m_run[j], m_new);
      l_run[j] = l_run[j] * alpha + warp_sum(pr);
      m_run[j] = m_new;
      s_s[h * kTile + lane] = pr;
      if (lane == 0) alpha_s[h] = alpha;
    }
    __syncthreads();

    // P·V. Rows past the sequence end were zero-filled, and their probabilities are 0.
    if (pv_active) {
#pragma unroll
      for (int j = 0; j < kHeads; ++j) {
        const int h = subset + j * subsets;
        if (h < kHeads) {
          acc[j][0] *= alpha_s[h];
          acc[j][1] *= alpha_s[h];
        }
      }
      for (int t = 0; t < kTile; ++t) {
        const KV* vrow = reinterpret_cast<const KV*>(vs + t * stride) + 2 * pair;
        const float v0 = kv_to_float<KV>(vrow[0]), v1 = kv_to_float<KV>(vrow[1]);
#pragma unroll
        for (int j = 0; j < kHeads; ++j) {
          const int h = subset + j * subsets;
          if (h < kHeads) {
            const float pr = s_s[h * kTile + t];
            acc[j][0] = fmaf(pr, v0, acc[j][0]);
            acc[j][1] = fmaf(pr, v1, acc[j][1]);
          }
        }
      }
    }
    __syncthreads();  // the next iteration's prefetch overwrites this stage
  }

  if (lane == 0) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      m_s[warp + 4 * j] = m_run[j];
      l_s[warp + 4 * j] = l_run[j];
    }
  }
  __syncthreads();

  const int64_t base = (int64_t(split) * p.num_tokens + token) * p.num_heads;
  if (pv_active) {
#pragma unroll
    for (int j = 0; j < kHeads; ++j) {
      const int h = subset + j * subsets;
      if (h < nh) {
        const float l = l_s[h];
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        float2 o = make_float2(acc[j][0] * inv, acc[j][1] * inv);
        *reinterpret_cast<float2*>(p.o_partial + (base + head0 + h) * D + 2 * pair) = o;
      }
    }
  }
  if (threadIdx.x < nh) {
    const float l = l_s[threadIdx.x];
    p.lse_partial[base + head0 + threadIdx.x] = l > 0.0f ? m_s[threadIdx.x] + log2f(l) : -INFINITY;
  }
}

template <typename T, typename KV>
cudaError_t launch(const AttnParams& p, cudaStream_t stream) {
  const int smem = decode_smem_bytes(p.head_size, sizeof(KV));
  cudaError_t e = cudaFuncSetAttribute(decode_kernel<T, KV>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  const int slices = (p.group + p.heads_per_cta - 1) / p.heads_per_cta;
  dim3 grid(p.num_splits, p.num_kv_heads * slices, p.num_listed);
  decode_kernel<T, KV><<<grid, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

int launch_decode(const AttnParams& p, ElemKind q_kind, ElemKind kv_kind, void* stream_ptr) {
  if (p.num_listed == 0) return cudaSuccess;
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  const bool fp8 = kv_kind == ElemKind::fp8_e4m3;
  if (q_kind == ElemKind::f16) return fp8 ? launch<__half, uint8_t>(p, stream) : launch<__half, __half>(p, stream);
  if (q_kind == ElemKind::bf16)
    return fp8 ? launch<__nv_bfloat16, uint8_t>(p, stream) : launch<__nv_bfloat16, __nv_bfloat16>(p, stream);
  return cudaErrorInvalidValue;
}

}  // namespace attn::cuda_flash
