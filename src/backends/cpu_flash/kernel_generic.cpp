// Portable build of the cpu_flash kernel: no ISA flags, runs on any CPU (x86-64 baseline, ARM).
#define ATTN_CF_NS generic
#include "kernels/simd/simd_scalar.hpp"
#include "backends/cpu_flash/kernel_impl.hpp"

namespace attn::cpu_flash {

void reserve_item_scratch(int rows, int head_size, int head_size_v) {
  generic::reserve_scratch(rows, head_size, head_size_v);
}

const KernelTable& kernels_generic() {
  static const KernelTable table = generic::make_table<generic::QkF32>();
  return table;
}

}  // namespace attn::cpu_flash
