// Prefill path, run phase: the packing loop (every tile of every packed group, split
// statically: equal-cost jobs) ahead of the forward's item loop, and the per-item hook.
#include "backends/cpu_flash/prefill_run.hpp"

namespace attn::cpu_flash::prefill {

PackLayout plan_for(const KernelArgs& a, const Plan& plan, Isa isa, Route route) {
#if defined(__x86_64__) || defined(_M_X64)
  if (isa >= Isa::avx512) return plan_pack(a, plan, isa >= Isa::avx512_bf16, isa == Isa::amx, route);
#endif
  (void)a, (void)plan, (void)isa, (void)route;
  return {};
}

Call::Call(const KernelArgs& a, const PackLayout& layout, char* buf, int threads) : layout_(&layout), packed_(buf) {
#if defined(__x86_64__) || defined(_M_X64)
  if (layout.bytes == 0) return;
  const int64_t jobs = int64_t(layout.jobs.size());
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t j = 0; j < jobs; ++j) pack_tile_avx512(a, layout, layout.jobs[std::size_t(j)], packed_);
#else
  (void)a, (void)threads;
#endif
}

bool Call::run(const KernelArgs& a, const WorkItem& it) const {
#if defined(__x86_64__) || defined(_M_X64)
  if (!takes_prefill(*layout_, a, it)) return false;
  if (!(stage_mask_for_measurement() & kPackOnly)) run_item_avx512(a, *layout_, it, packed_);
  return true;
#else
  return false;
#endif
}

void Call::reserve(const KernelArgs& a, int rows) const {
#if defined(__x86_64__) || defined(_M_X64)
  if (layout_->bytes != 0) reserve_tile_scratch_avx512(a, *layout_, rows);
#else
  (void)a, (void)rows;
#endif
}

}  // namespace attn::cpu_flash::prefill
