// Prefill path, run phase: the packing loop (every tile of every packed group, split
// statically: equal-cost jobs) ahead of the forward's item loop, and the per-item hook.
#include "backends/cpu_flash/prefill_run.hpp"

namespace attn::cpu_flash::prefill {

Call::Call(const KernelArgs& a, const Plan& plan, Isa isa, Route route, int threads) {
#if defined(__x86_64__) || defined(_M_X64)
  if (isa < Isa::avx512) return;
  layout_ = plan_pack(a, plan, isa == Isa::avx512_bf16, route);
  if (layout_.bytes == 0) return;
  packed_ = packed_buffer(layout_.bytes);
  const int64_t jobs = int64_t(layout_.jobs.size());
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t j = 0; j < jobs; ++j) pack_tile_avx512(a, layout_, layout_.jobs[std::size_t(j)], packed_);
#endif
}

bool Call::run(const KernelArgs& a, const WorkItem& it) const {
#if defined(__x86_64__) || defined(_M_X64)
  if (!takes_prefill(layout_, a, it)) return false;
  if (!(stage_mask_for_measurement() & kPackOnly)) run_item_avx512(a, layout_, it, packed_);
  return true;
#else
  return false;
#endif
}

}  // namespace attn::cpu_flash::prefill
