#pragma once
// Device helpers shared by the kernels: element conversions, cp.async, warp reductions.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cstdint>

#include "params.hpp"

namespace attn::cuda_flash {

// fp8 e4m3 → fp32 by placing the 7 magnitude bits at the top of fp32's exponent/mantissa and
// re-biasing by 2^120 (exponent bias 127 - 7). Exact for normals and subnormals alike; needs
// denormals kept (no --use_fast_math) since e4m3 subnormals land on fp32 denormals first.
__device__ __forceinline__ float fp8_e4m3_to_float(uint8_t v) {
  const uint32_t mag = uint32_t(v & 0x7fu) << 20;
  float f = __uint_as_float(mag) * 0x1p120f;
  if ((v & 0x7fu) == 0x7fu) f = __uint_as_float(0x7fc00000u);  // e4m3 NaN
  return (v & 0x80u) ? -f : f;
}

template <typename T> struct Elem;
template <> struct Elem<__half> {
  static constexpr ElemKind kind = ElemKind::f16;
  __device__ static float to_float(__half x) { return __half2float(x); }
  __device__ static __half from_float(float x) { return __float2half_rn(x); }
  __device__ static uint32_t pack2(float a, float b) {
    __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&h);
  }
};
template <> struct Elem<__nv_bfloat16> {
  static constexpr ElemKind kind = ElemKind::bf16;
  __device__ static float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
  __device__ static __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
  __device__ static uint32_t pack2(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&h);
  }
};

// Cache element storage: a 16-bit type, or uint8_t holding fp8 e4m3.
template <typename KV> __device__ __forceinline__ float kv_to_float(KV x) { return Elem<KV>::to_float(x); }
template <> __device__ __forceinline__ float kv_to_float<uint8_t>(uint8_t x) { return fp8_e4m3_to_float(x); }

// 8 cache elements (16 bytes of a 16-bit cache, 8 bytes of an fp8 cache) → 8 floats.
template <typename KV>
__device__ __forceinline__ void load8_as_float(const KV* src, float out[8]) {
  if constexpr (sizeof(KV) == 2) {
    const uint4 raw = *reinterpret_cast<const uint4*>(src);
    const KV* e = reinterpret_cast<const KV*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = kv_to_float<KV>(e[i]);
  } else {
    const uint2 raw = *reinterpret_cast<const uint2*>(src);
    const uint8_t* e = reinterpret_cast<const uint8_t*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = fp8_e4m3_to_float(e[i]);
  }
}

// Asynchronous global→shared copies. src_bytes = 0 zero-fills the destination without reading
// (used for rows past the sequence end, so poison in unused slots never reaches the math).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async8(void* smem, const void* gmem, bool valid) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int n = valid ? 8 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// exp2 that maps -inf to 0 without producing NaN when both operands are -inf.
__device__ __forceinline__ float exp2_diff(float a, float m) { return a == -INFINITY ? 0.0f : exp2f(a - m); }

// Raw logit (q·k) → log2-domain score: scale, soft-cap (before masking, DESIGN §4), log2(e).
__device__ __forceinline__ float score_log2(float dot, float scale, float soft_cap) {
  float s = dot * scale;
  if (soft_cap > 0.0f) s = soft_cap * tanhf(s / soft_cap);
  return s * 1.4426950408889634f;
}

// Whether key position kpos is visible from query position qpos.
__device__ __forceinline__ bool key_visible(int kpos, int qpos, int seq_len, bool causal, int window) {
  if (kpos >= seq_len) return false;
  if (causal && kpos > qpos) return false;
  if (window > 0 && kpos <= qpos - window) return false;
  return true;
}

// Element offset of (token position, kv head) in the paged cache; the caller guarantees pos is
// inside the sequence, so the block-table entry is valid.
__device__ __forceinline__ int64_t kv_row_offset(const AttnParams& p, const int32_t* table, int pos, int kvh) {
  const int blk = table[pos / p.block_size];
  return int64_t(blk) * p.block_stride + int64_t(pos % p.block_size) * p.token_stride + int64_t(kvh) * p.head_stride;
}

}  // namespace attn::cuda_flash
