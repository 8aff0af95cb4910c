#pragma once
/// The prefill side of one forward call, as a hook for the item loop: construction plans the
/// packed K/V and packs it on `threads` threads (before the items start, so every query tile of
/// a group shares one packing); run() takes the items that are prefill tiles.
#include "backends/cpu_flash/isa.hpp"
#include "backends/cpu_flash/plan.hpp"
#include "backends/cpu_flash/prefill.hpp"

namespace attn::cpu_flash::prefill {

class Call {
 public:
  Call(const KernelArgs& a, const Plan& plan, Isa isa, Route route, int threads);
  /// Runs `it` on the prefill kernel when it is a prefill tile; false leaves it to the caller.
  bool run(const KernelArgs& a, const WorkItem& it) const;

 private:
  PackLayout layout_;
  char* packed_ = nullptr;
};

}  // namespace attn::cpu_flash::prefill
