#pragma once
// Linear attention with per-head decay (MiniMax lightning-attention style) over one
// sequence and a block of heads: recurrent form for decode, chunked form for prefill (per-ISA builds).
#include <cstdint>

namespace attn::mixer {

struct LinearScan {
  const float *q, *k, *v;  // [T, H, dk], [T, H, dk], [T, H, dv]
  const float* A;          // [H] log decay per token (<= 0)
  float* out;              // [T, H, dv]
  float scale;
  int64_t heads, dk, dv;
};

/// Scratch floats the chunked form needs for chunk length L and a block of `heads` heads (layout
/// in linear_chunk.inc; rows padded to 16 floats so the tile kernels never need masked loads).
inline int64_t linear_scratch_floats(int64_t L, int64_t heads, int64_t dk, int64_t dv) {
  const int64_t Lp = (L + 15) / 16 * 16, dvp = (dv + 15) / 16 * 16;
  return heads * dk * dvp + 2 * L * dk + dk * Lp + 3 * L * dvp + L * Lp + Lp + 1;
}

// Tokens [t0, t0 + len) of heads [h0, h1); state: head h0's [dk, dv] block of the slot, the
// block's other heads after it. chunk == 0 or len == 1: the recurrence.
using LinearScanFn = void(const LinearScan& a, int64_t t0, int64_t len, int64_t h0, int64_t h1, int64_t chunk,
                          float* state, float* scratch);
namespace avx512 { LinearScanFn linear_scan; }
namespace generic { LinearScanFn linear_scan; }

}  // namespace attn::mixer
