// write_kv on the device (vLLM's reshape_and_cache): each new k/v row goes to its slot;
// negative slots are skipped; fp8 caches store x / scale, saturated to ±448 (round to nearest).
#include <cuda_runtime.h>

#include "device.cuh"

namespace attn::cuda_flash {

namespace {

constexpr int kThreads = 128;

__device__ __forceinline__ float load_src(const void* base, ElemKind kind, int64_t i) {
  switch (kind) {
    case ElemKind::f16: return __half2float(static_cast<const __half*>(base)[i]);
    case ElemKind::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

template <typename KV>
__device__ __forceinline__ KV encode(float x, float scale) {
  if constexpr (sizeof(KV) == 1) {
    return KV(__nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E4M3));
  } else {
    return Elem<KV>::from_float(x);
  }
}

template <typename KV>
__global__ void __launch_bounds__(kThreads) write_kv_kernel(WriteKVParams p) {
  const int token = blockIdx.x / p.num_kv_heads, h = blockIdx.x % p.num_kv_heads;
  const int64_t slot = p.slot_mapping[token];
  if (slot < 0) return;
  const int64_t dst = (slot / p.block_size) * p.block_stride + (slot % p.block_size) * p.token_stride + int64_t(h) * p.head_stride;
  KV* kv = static_cast<KV*>(p.kv);
  const float ks = sizeof(KV) == 1 ? p.k_scales[h] : 1.0f;
  const float vs = sizeof(KV) == 1 ? p.v_scales[h] : 1.0f;
  for (int d = threadIdx.x; d < p.head_size; d += kThreads) {
    kv[dst + d] = encode<KV>(load_src(p.k, p.src_kind, int64_t(token) * p.k_stride_t + int64_t(h) * p.k_stride_h + d), ks);
    kv[dst + p.v_offset + d] = encode<KV>(load_src(p.v, p.src_kind, int64_t(token) * p.v_stride_t + int64_t(h) * p.v_stride_h + d), vs);
  }
}

}  // namespace

int launch_write_kv(const WriteKVParams& p, ElemKind cache_kind, void* stream_ptr) {
  if (p.num_tokens == 0) return cudaSuccess;
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  const dim3 grid(unsigned(p.num_tokens) * unsigned(p.num_kv_heads));
  switch (cache_kind) {
    case ElemKind::f16: write_kv_kernel<__half><<<grid, kThreads, 0, stream>>>(p); break;
    case ElemKind::bf16: write_kv_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(p); break;
    case ElemKind::fp8_e4m3: write_kv_kernel<uint8_t><<<grid, kThreads, 0, stream>>>(p); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace attn::cuda_flash
