// AVX2 + FMA build of the cpu_flash kernel.
#define ATTN_CF_NS avx2
#include "kernels/simd/simd_avx2.hpp"
#include "backends/cpu_flash/kernel_impl.hpp"
#include "backends/cpu_flash/kernel_int_dot_avx2.hpp"

namespace attn::cpu_flash {

const KernelTable& kernels_avx2() {
  static const KernelTable table = [] {
    KernelTable t = avx2::make_table<avx2::QkF32>();
    t.by_kv[int(KvType::i8)] = &avx2::run_item_i8;
    t.by_kv[int(KvType::bf16)] = &avx2::run_item_bf16;
    return t;
  }();
  return table;
}

}  // namespace attn::cpu_flash
