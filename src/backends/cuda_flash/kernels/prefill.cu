// Picks the prefill register tier for the head size (limits.hpp: kHeadTiers).
#include <cuda_runtime.h>

#include "../limits.hpp"
#include "params.hpp"

namespace attn::cuda_flash {

template <int DT>
cudaError_t launch_prefill_tier(const AttnParams& p, ElemKind q_kind, ElemKind kv_kind, int max_query_rows,
                                cudaStream_t stream);

int launch_prefill(const AttnParams& p, ElemKind q_kind, ElemKind kv_kind, int max_query_rows, void* stream_ptr) {
  static_assert(kHeadTiers[0] == 64 && kHeadTiers[1] == 128 && kHeadTiers[2] == 256 && kMaxHead == 256);
  if (p.num_listed == 0 || max_query_rows == 0) return cudaSuccess;
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  if (p.head_size <= 64) return launch_prefill_tier<64>(p, q_kind, kv_kind, max_query_rows, stream);
  if (p.head_size <= 128) return launch_prefill_tier<128>(p, q_kind, kv_kind, max_query_rows, stream);
  return launch_prefill_tier<256>(p, q_kind, kv_kind, max_query_rows, stream);
}

}  // namespace attn::cuda_flash
