#pragma once
/// Software prefetch that the compiler cannot drop. GCC treats __builtin_prefetch as free of side
/// effects when it classifies functions, so a helper (or lambda) that only prefetches is found
/// `const` and every call to it is deleted as dead code: cpu_flash's general kernel and the Mamba2
/// and GDN chunk loops lost all their prefetches that way (GCC 12, -O3). An asm statement is a
/// side effect, so the helper and its calls stay.
#include <cstdint>

namespace attn::cpu {

/// Where the line should go: L1 (loads soon) or L2 (a step ahead, without taking L1 fill buffers).
enum class PrefetchTo : uint8_t { l1, l2 };

template <PrefetchTo To = PrefetchTo::l1>
inline void prefetch(const void* p) {
#if defined(__x86_64__) || defined(_M_X64)
  if constexpr (To == PrefetchTo::l1)
    __asm__ volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
  else
    __asm__ volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 0, To == PrefetchTo::l1 ? 3 : 2);
#endif
}

}  // namespace attn::cpu
