// AVX2 + FMA build of the cpu_flash kernel.
#define ATTN_CF_NS avx2
#include "kernels/simd/simd_avx2.hpp"
#include "backends/cpu_flash/kernel_impl.hpp"

namespace attn::cpu_flash {

const KernelTable& kernels_avx2() {
  static const KernelTable table = avx2::make_table<avx2::QkF32>();
  return table;
}

}  // namespace attn::cpu_flash
