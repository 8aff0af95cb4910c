#pragma once
// Counts every operator new while armed, on any thread (the kernels' OpenMP workers included).
// The replacement operators live in counting_new.cpp, linked only into attn_alloc_tests.
#include <cstdint>

namespace attn::test {

/// Heap allocations made through operator new (all forms) between arm() and disarm().
struct AllocationCounter {
  static void arm();
  static int64_t disarm();  // returns the count since arm()
};

/// The allocations `f()` makes.
template <class F>
int64_t allocations_of(F&& f) {
  AllocationCounter::arm();
  f();
  return AllocationCounter::disarm();
}

}  // namespace attn::test
