#pragma once
// The timed inner loops of the ceilings, one table per ISA (bench_simd.<isa>.cpp, compiled with
// that ISA's flags) and a portable one; simd() picks the best the CPU runs. Every loop keeps
// enough independent accumulators that it is bound by throughput, never by latency.
#include <cstddef>
#include <cstdint>

namespace attn_bench {

struct SimdKernels {
  const char* read_instruction;
  /// Integer sum of `bytes` (a multiple of 512) from 64-byte aligned `p`: a pure read.
  uint64_t (*read_sum)(const void* p, std::size_t bytes);
  const char* fma_instruction;
  /// `iters` rounds over the FMA chains; returns the flop done (0: no such unit).
  double (*fma)(long iters);
  const char* dot_instruction;
  double (*dot_bf16)(long iters);  // nullptr: no vdpbf16ps
};

const SimdKernels* simd_avx512();  // nullptr when not built with AVX-512 flags
const SimdKernels* simd_avx2();    // nullptr when not built with AVX2 flags
const SimdKernels& simd_portable();
/// The best table this CPU runs (attn::cpu::best_isa of the detected CPU).
const SimdKernels& simd();

/// AMX: the CPU layer's grant of tile data (attn::cpu::amx_permitted); false when not granted.
bool amx_granted();
/// `iters` rounds of tdpbf16ps on 4 independent accumulator tiles after loading the tile
/// config on this thread; returns the flop done (0 when not built with AMX flags).
double amx_tdpbf16ps(long iters);

}  // namespace attn_bench
