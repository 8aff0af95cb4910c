// AVX-512 build of the cpu_flash kernel (fp32 FMA on K/V dequantized in registers).
#define ATTN_CF_NS avx512
#include "kernels/simd/simd_avx512.hpp"
#include "backends/cpu_flash/kernel_impl.hpp"

namespace attn::cpu_flash {

const KernelTable& kernels_avx512() {
  static const KernelTable table = avx512::make_table<avx512::QkF32>();
  return table;
}

}  // namespace attn::cpu_flash
