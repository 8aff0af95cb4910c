// The head-size tier 64 of the prefill kernel (see prefill.cuh); one file per tier so nvcc
// compiles the tiers in parallel.
#include "prefill.cuh"

namespace attn::cuda_flash {
template cudaError_t launch_prefill_tier<64>(const AttnParams&, ElemKind, ElemKind, int, cudaStream_t);
}  // namespace attn::cuda_flash
