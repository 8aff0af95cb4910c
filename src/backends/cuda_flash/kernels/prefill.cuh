#pragma once
// Prefill / chunked prefill on tensor cores (mma.sync m16n8k16, sm_80+), FlashAttention-2 style.
// A CTA owns 64 rows of (query token × query head of one GQA slice) — so every K/V tile is
// loaded once for all heads of the slice — and walks the visible keys in tiles of kBN. Each of
// the 4 warps owns 16 rows: S = Q·Kᵀ and O += P·V stay in registers (the mma accumulator layout
// is documented, unlike wmma's, which lets the online-softmax rescale happen in registers).
// Head sizes are a run-time value inside three register tiers (64 / 128 / 256), K's width is
// zero-padded to a multiple of 16 in shared memory.
#include <cuda_runtime.h>

#include "device.cuh"

namespace attn::cuda_flash {

namespace prefill {

constexpr int kThreads = 128;
constexpr int kBM = kPrefillTileRows;

template <int DT> __host__ __device__ constexpr int tile_keys() { return DT > 128 ? 32 : 64; }
template <int DT> __host__ __device__ constexpr int row_elems() { return DT + 8; }  // +16 B: conflict-free fragment loads
template <int DT> __host__ __device__ constexpr int smem_bytes() { return (kBM + 2 * tile_keys<DT>()) * row_elems<DT>() * 2; }

template <typename T>
__device__ __forceinline__ void mma_16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  if constexpr (Elem<T>::kind == ElemKind::f16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

__device__ __forceinline__ uint32_t ld_u32(const void* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ uint32_t pack_u16(uint16_t lo, uint16_t hi) { return uint32_t(lo) | (uint32_t(hi) << 16); }

// Fills a [rows, DT+8] tile of T in shared memory with K or V rows of the cache (columns past
// head_size and rows past `end` become 0). A 16-bit cache of type T is copied with cp.async; an
// fp8 cache is widened exactly to T on the way (its scale is applied outside the tile).
template <typename T, typename KV, int DT>
__device__ void load_kv_tile(const AttnParams& p, const int32_t* table, int kvh, int start, int end, int rows,
                             int64_t extra, T* dst) {
  constexpr int RE = row_elems<DT>();
  const int D = p.head_size;
  const int Dk = (D + 15) / 16 * 16;
  const int per_row = Dk / 8;  // 8-element chunks, the padding chunk included
  const KV* kv = static_cast<const KV*>(p.kv);
  for (int i = threadIdx.x; i < rows * per_row; i += kThreads) {
    const int r = i / per_row, c = i % per_row;
    const int pos = start + r;
    const bool valid = pos < end && c * 8 < D;
    T* d = dst + r * RE + c * 8;
    const KV* g = valid ? kv + kv_row_offset(p, table, pos, kvh) + extra + c * 8 : kv;
    if constexpr (sizeof(KV) == 2) {
      cp_async16(d, g, valid);
    } else {
      float f[8];
      if (valid) {
        load8_as_float<KV>(g, f);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) f[e] = 0.0f;
      }
      uint4 packed;
      packed.x = Elem<T>::pack2(f[0], f[1]);
      packed.y = Elem<T>::pack2(f[2], f[3]);
      packed.z = Elem<T>::pack2(f[4], f[5]);
      packed.w = Elem<T>::pack2(f[6], f[7]);
      *reinterpret_cast<uint4*>(d) = packed;
    }
  }
}

template <typename T, typename KV, int DT>
__global__ void __launch_bounds__(kThreads) prefill_kernel(AttnParams p) {
  constexpr int BN = tile_keys<DT>();
  constexpr int RE = row_elems<DT>();
  constexpr int NT_S = BN / 8;   // n-tiles of S per warp
  constexpr int NT_O = DT / 8;   // n-tiles of O per warp (guarded by the run-time head size)
  extern __shared__ __align__(16) char smem[];
  T* q_s = reinterpret_cast<T*>(smem);
  T* k_s = q_s + kBM * RE;
  T* v_s = k_s + BN * RE;

  const int slices = (p.group + p.heads_per_cta - 1) / p.heads_per_cta;
  const int kvh = blockIdx.y / slices;
  const int head0 = kvh * p.group + (blockIdx.y % slices) * p.heads_per_cta;
  const int hc = min(p.heads_per_cta, kvh * p.group + p.group - head0);  // heads in this slice
  const int seq = p.seq_list[blockIdx.z];
  const int q_start = p.query_start_loc[seq];
  const int q_len = p.query_start_loc[seq + 1] - q_start;
  const int seq_len = p.seq_lens[seq];
  const int ctx = seq_len - q_len;
  const int row0 = blockIdx.x * kBM;
  if (row0 >= q_len * hc) return;
  const int D = p.head_size;
  const int Dk = (D + 15) / 16 * 16;
  const int32_t* table = p.block_table + int64_t(seq) * p.max_blocks_per_seq;

  // Q tile: row r = (query token (row0 + r) / hc, head (row0 + r) % hc).
  {
    const int per_row = Dk / 8;
    const T* q = static_cast<const T*>(p.q);
    for (int i = threadIdx.x; i < kBM * per_row; i += kThreads) {
      const int r = i / per_row, c = i % per_row;
      const int row = row0 + r;
      const bool valid = row < q_len * hc && c * 8 < D;
      const T* g = valid ? q + int64_t(q_start + row / hc) * p.q_stride_t + int64_t(head0 + row % hc) * p.q_stride_h + c * 8 : q;
      cp_async16(q_s + r * RE + c * 8, g, valid);
    }
    cp_async_commit();
  }

  // Keys visible from any row of the tile.
  const int first_q = row0 / hc, last_q = min(q_len - 1, (row0 + kBM - 1) / hc);
  const int kend = p.causal ? min(seq_len, ctx + last_q + 1) : seq_len;
  int kbegin = 0;
  if (p.window > 0) kbegin = max(0, ctx + first_q - p.window + 1) / BN * BN;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int wr = warp * 16;  // the warp's first row in the tile
  // Per-thread rows: wr + g and wr + g + 8.
  int qpos[2];
  bool row_ok[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = row0 + wr + g + 8 * i;
    row_ok[i] = row < q_len * hc;
    qpos[i] = ctx + (row_ok[i] ? row / hc : 0);
  }
  const float k_scale = p.k_scales[kvh];

  float o[NT_O][4];
#pragma unroll
  for (int n = 0; n < NT_O; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_part[2] = {0.0f, 0.0f};

  for (int k0 = kbegin; k0 < kend; k0 += BN) {
    __syncthreads();  // the previous tile's readers are done
    load_kv_tile<T, KV, DT>(p, table, kvh, k0, kend, BN, 0, k_s);
    load_kv_tile<T, KV, DT>(p, table, kvh, k0, kend, BN, p.v_offset, v_s);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();

    // S = Q·Kᵀ for the warp's 16 rows × BN keys.
    float s[NT_S][4];
#pragma unroll
    for (int n = 0; n < NT_S; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < DT / 16; ++kk) {
      if (kk * 16 < Dk) {
        uint32_t a[4];
        const T* qa = q_s + (wr + g) * RE + kk * 16 + 2 * t;
        a[0] = ld_u32(qa);
        a[1] = ld_u32(qa + 8 * RE);
        a[2] = ld_u32(qa + 8);
        a[3] = ld_u32(qa + 8 * RE + 8);
#pragma unroll
        for (int n = 0; n < NT_S; ++n) {
          const T* kb = k_s + (n * 8 + g) * RE + kk * 16 + 2 * t;
          mma_16816<T>(s[n], a, ld_u32(kb), ld_u32(kb + 8));
        }
      }
    }

    // Scale, soft-cap, mask; online softmax over the tile (rows g and g+8 of the warp; the 4
    // lanes of a quad share a row).
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < NT_S; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e / 2;
        const int kpos = k0 + n * 8 + 2 * t + (e % 2);
        const bool vis = row_ok[i] && key_visible(kpos, qpos[i], kend, p.causal, p.window);
        s[n][e] = vis ? score_log2(s[n][e] * k_scale, p.scale, p.soft_cap) : -INFINITY;
        tile_max[i] = fmaxf(tile_max[i], s[n][e]);
      }
    }
    float alpha[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
      const float m_new = fmaxf(m_run[i], tile_max[i]);
      alpha[i] = exp2_diff(m_run[i], m_new);
      m_run[i] = m_new;
      l_part[i] *= alpha[i];
    }
#pragma unroll
    for (int n = 0; n < NT_S; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = e / 2;
        s[n][e] = exp2_diff(s[n][e], m_run[i]);
        l_part[i] += s[n][e];
      }
    }
#pragma unroll
    for (int n = 0; n < NT_O; ++n) {
      o[n][0] *= alpha[0];
      o[n][1] *= alpha[0];
      o[n][2] *= alpha[1];
      o[n][3] *= alpha[1];
    }

    // O += P·V: the S accumulators of two adjacent n-tiles are exactly an A fragment.
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t a[4];
      a[0] = Elem<T>::pack2(s[2 * kk][0], s[2 * kk][1]);
      a[1] = Elem<T>::pack2(s[2 * kk][2], s[2 * kk][3]);
      a[2] = Elem<T>::pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = Elem<T>::pack2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      const uint16_t* vb = reinterpret_cast<const uint16_t*>(v_s) + (kk * 16 + 2 * t) * RE + g;
#pragma unroll
      for (int n = 0; n < NT_O; ++n) {
        if (n * 8 < D) {
          const uint16_t* v = vb + n * 8;
          const uint32_t b0 = pack_u16(v[0], v[RE]);
          const uint32_t b1 = pack_u16(v[8 * RE], v[9 * RE]);
          mma_16816<T>(o[n], a, b0, b1);
        }
      }
    }
  }

  // Finish: the row sums live spread over the quad; normalise and store the split-0 partials.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l_part[i] += __shfl_xor_sync(0xffffffffu, l_part[i], 1);
    l_part[i] += __shfl_xor_sync(0xffffffffu, l_part[i], 2);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (!row_ok[i]) continue;
    const int row = row0 + wr + g + 8 * i;
    const int64_t th = int64_t(q_start + row / hc) * p.num_heads + head0 + row % hc;
    const float inv = l_part[i] > 0.0f ? 1.0f / l_part[i] : 0.0f;
    float* dst = p.o_partial + th * D;
#pragma unroll
    for (int n = 0; n < NT_O; ++n) {
      if (n * 8 < D) {
        *reinterpret_cast<float2*>(dst + n * 8 + 2 * t) = make_float2(o[n][2 * i] * inv, o[n][2 * i + 1] * inv);
      }
    }
    if (t == 0) p.lse_partial[th] = l_part[i] > 0.0f ? m_run[i] + log2f(l_part[i]) : -INFINITY;
  }
}

template <typename T, typename KV, int DT>
cudaError_t launch_tier(const AttnParams& p, int max_query_rows, cudaStream_t stream) {
  constexpr int smem = smem_bytes<DT>();
  cudaError_t e = cudaFuncSetAttribute(prefill_kernel<T, KV, DT>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  const int slices = (p.group + p.heads_per_cta - 1) / p.heads_per_cta;
  dim3 grid((max_query_rows + kBM - 1) / kBM, p.num_kv_heads * slices, p.num_listed);
  prefill_kernel<T, KV, DT><<<grid, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace prefill

// One tier's launcher for every q / cache type pair (defined in prefill_<tier>.cu so the three
// tiers compile in parallel).
template <int DT>
cudaError_t launch_prefill_tier(const AttnParams& p, ElemKind q_kind, ElemKind kv_kind, int max_query_rows,
                                cudaStream_t stream) {
  const bool fp8 = kv_kind == ElemKind::fp8_e4m3;
  if (q_kind == ElemKind::f16)
    return fp8 ? prefill::launch_tier<__half, uint8_t, DT>(p, max_query_rows, stream)
               : prefill::launch_tier<__half, __half, DT>(p, max_query_rows, stream);
  if (q_kind == ElemKind::bf16)
    return fp8 ? prefill::launch_tier<__nv_bfloat16, uint8_t, DT>(p, max_query_rows, stream)
               : prefill::launch_tier<__nv_bfloat16, __nv_bfloat16, DT>(p, max_query_rows, stream);
  return cudaErrorInvalidValue;
}

}  // namespace attn::cuda_flash
