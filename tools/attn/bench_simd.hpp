#pragma once
// The timed inner loops of the ceilings, one table per ISA (bench_simd.<isa>.cpp, compiled with
// that ISA's flags) and a portable one; simd() picks the best the CPU runs. Every loop keeps
// enough independent accumulators that it is bound by throughput, never by latency.
#include <cstddef>
#include <cstdint>

namespace attn_bench {

/// Rows of one paged work item, in bytes: K row r of token t in block b sits at
/// base + b·block_stride + t·token_stride + head_offset, its V row v_offset further on.
struct PagedRows {
  const std::byte* base = nullptr;
  const int32_t* blocks = nullptr;
  int32_t block_size = 0, begin = 0, end = 0;
  int64_t block_stride = 0, token_stride = 0, head_offset = 0, v_offset = 0;
  int32_t k_bytes = 0, v_bytes = 0;
};

struct SimdKernels {
  const char* read_instruction;
  /// Integer sum of `bytes` (a multiple of 512) from 64-byte aligned `p`: a pure read.
  uint64_t (*read_sum)(const void* p, std::size_t bytes);
  /// Integer sum of every K and V row of the item.
  uint64_t (*paged_sum)(const PagedRows& rows);
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
