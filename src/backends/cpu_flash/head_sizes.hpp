#pragma once
/// The head sizes cpu_flash serves: one constexpr array from which both the capability rule
/// (descriptor) and the kernels' accepted sizes (forward) come, so they cannot drift.
#include <array>

#include "attn/capabilities.hpp"

namespace attn::cpu_flash {

/// 32..256 in steps of 8: every size is a whole number of AVX2 vectors (8 floats); AVX-512
/// handles the 8-wide remainder with one masked load.
inline constexpr std::array<int, 29> kHeadSizes = [] {
  std::array<int, 29> a{};
  for (int i = 0; i < 29; ++i) a[i] = 32 + 8 * i;
  return a;
}();
inline constexpr int kMaxHeadSize = kHeadSizes.back();

constexpr bool supports_head_size(int d) {
  for (int h : kHeadSizes)
    if (h == d) return true;
  return false;
}

/// The capability rule, derived from the array (an arithmetic progression, checked at compile time).
inline SizeRule head_size_rule() {
  constexpr int step = kHeadSizes[1] - kHeadSizes[0];
  static_assert([] {
    for (std::size_t i = 1; i < kHeadSizes.size(); ++i)
      if (kHeadSizes[i] - kHeadSizes[i - 1] != kHeadSizes[1] - kHeadSizes[0]) return false;
    return true;
  }());
  return SizeRule::range(kHeadSizes.front(), kHeadSizes.back(), step);
}

}  // namespace attn::cpu_flash
