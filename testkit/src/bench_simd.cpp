// The portable table (64-bit integer loads, no FMA figure) and the run-time choice of table.
#include "testkit/bench_simd.hpp"

#include <algorithm>

#include "attn/platform.hpp"
#include "cpu/isa.hpp"

namespace attn_bench {
namespace {

uint64_t read_sum(const void* p, std::size_t bytes) {
  const auto* q = static_cast<const uint64_t*>(p);
  uint64_t a[8] = {};
  for (std::size_t i = 0; i < bytes / 8; i += 8)
    for (int j = 0; j < 8; ++j) a[j] += q[i + j];
  uint64_t s = 0;
  for (uint64_t x : a) s += x;
  return s;
}

const SimdKernels kPortable{"64-bit scalar loads", read_sum, "none (no FMA unit found)", nullptr, "", nullptr};

}  // namespace

bool amx_granted() { return attn::cpu::amx_permitted(); }

const SimdKernels& simd_portable() { return kPortable; }

const SimdKernels& simd() {
  // The machine's best build, whatever ATTN_CPU_ISA forces on the kernels: a ceiling is the machine's.
  static const SimdKernels* chosen = [] {
    using attn::cpu::Isa;
    const Isa best = attn::cpu::best_isa(attn::detect_cpu());
    if (best >= Isa::avx512 && simd_avx512()) return simd_avx512();
    if (best >= Isa::avx2 && simd_avx2()) return simd_avx2();
    return &kPortable;
  }();
  return *chosen;
}

}  // namespace attn_bench
