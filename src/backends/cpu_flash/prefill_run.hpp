#pragma once
/// The prefill side of one run, as a hook for the item loop: the step plan lays out the packed
/// K/V once (plan_for); construction packs it on `threads` threads into the caller's workspace
/// (before the items start, so every query tile of a group shares one packing); run() takes the
/// items that are prefill tiles.
#include "backends/cpu_flash/isa.hpp"
#include "backends/cpu_flash/plan.hpp"
#include "backends/cpu_flash/prefill.hpp"

namespace attn::cpu_flash::prefill {

/// The packed layout for `plan` on `isa` (bytes = 0: no item takes the prefill path). `a` needs
/// only the layer's shape fields.
PackLayout plan_for(const KernelArgs& a, const Plan& plan, Isa isa, Route route);

class Call {
 public:
  /// `buf`: layout.bytes of 64-byte-aligned scratch.
  Call(const KernelArgs& a, const PackLayout& layout, char* buf, int threads);
  /// Runs `it` on the prefill kernel when it is a prefill tile; false leaves it to the caller.
  bool run(const KernelArgs& a, const WorkItem& it) const;
  /// Grows the calling thread's tile scratch for items of up to `rows` rows (no-op without tiles).
  void reserve(const KernelArgs& a, int rows) const;

 private:
  const PackLayout* layout_;
  char* packed_;
};

}  // namespace attn::cpu_flash::prefill
