#pragma once
/// The head sizes cpu_flash serves: one rule from which both the capability (descriptor) and
/// the kernels' accepted sizes (forward) come, so they cannot drift.
#include "attn/capabilities.hpp"

namespace attn::cpu_flash {

/// Every size 1..256. The general kernel runs whole vectors and then one tail of the remaining
/// elements (an AVX-512 masked load, an AVX2 load through a zero-padded copy, scalar code);
/// the decode kernel takes multiples of 32 (decode.hpp) and the prefill tiles' bf16 form even
/// sizes (prefill_plan.cpp); every other size runs on the general kernel.
inline constexpr int kMinHeadSize = 1;
inline constexpr int kMaxHeadSize = 256;

constexpr bool supports_head_size(int d) { return d >= kMinHeadSize && d <= kMaxHeadSize; }

inline SizeRule head_size_rule() { return SizeRule::range(kMinHeadSize, kMaxHeadSize, 1); }

}  // namespace attn::cpu_flash
