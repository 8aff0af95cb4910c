// Deterministic merge of split-KV partials: splits are combined in index order with their
// log-sum-exp weights, the sink joins the denominator as one more logit, the fp8 V scale is
// applied, and the result is written in the output dtype. A row with no visible key (and no
// sink mass to speak of) yields 0, never NaN.
#include <cuda_runtime.h>

#include "device.cuh"

namespace attn::cuda_flash {

namespace {

constexpr int kThreads = 128;
constexpr int kMaxSplits = 64;

template <typename T>
__global__ void __launch_bounds__(kThreads) merge_kernel(MergeParams p) {
  const int token = blockIdx.x / p.num_heads, head = blockIdx.x % p.num_heads;
  const int splits = min(p.seq_splits[p.token_seq[token]], kMaxSplits);
  __shared__ float w_s[kMaxSplits];
  __shared__ float inv_s;
  if (threadIdx.x == 0) {
    float m = -INFINITY;
    for (int s = 0; s < splits; ++s) m = fmaxf(m, p.lse_partial[(int64_t(s) * p.num_tokens + token) * p.num_heads + head]);
    const float sink = p.sinks ? p.sinks[head] * 1.4426950408889634f : -INFINITY;
    const float m_all = fmaxf(m, sink);
    float total = 0.0f;
    for (int s = 0; s < splits; ++s) {
      w_s[s] = exp2_diff(p.lse_partial[(int64_t(s) * p.num_tokens + token) * p.num_heads + head], m_all);
      total += w_s[s];
    }
    total += exp2_diff(sink, m_all);
    inv_s = (m == -INFINITY || total == 0.0f) ? 0.0f : p.v_scales[head / p.group] / total;
  }
  __syncthreads();
  T* out = static_cast<T*>(p.out) + int64_t(token) * p.out_stride_t + int64_t(head) * p.out_stride_h;
  for (int d = threadIdx.x; d < p.head_size; d += kThreads) {
    float acc = 0.0f;
    for (int s = 0; s < splits; ++s)
      if (w_s[s] != 0.0f) acc += w_s[s] * p.o_partial[((int64_t(s) * p.num_tokens + token) * p.num_heads + head) * p.head_size + d];
    out[d] = Elem<T>::from_float(acc * inv_s);
  }
}

}  // namespace

int launch_merge(const MergeParams& p, ElemKind out_kind, void* stream_ptr) {
  if (p.num_tokens == 0) return cudaSuccess;
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  const dim3 grid(unsigned(p.num_tokens) * unsigned(p.num_heads));
  if (out_kind == ElemKind::f16) merge_kernel<__half><<<grid, kThreads, 0, stream>>>(p);
  else if (out_kind == ElemKind::bf16) merge_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(p);
  else return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace attn::cuda_flash
