#pragma once
// Mamba-2 (SSD) scan over one sequence and a block of heads: single-step recurrence for decode, chunked
// form for prefill (per-ISA builds).
#include <cstdint>

namespace attn::mixer {

struct Mamba2Scan {
  const float* xbc;      // [T, conv_dim] after the conv: x [H·P] | B [G·N] | C [G·N]
  const float* dt;       // [T, H], before dt_bias + softplus
  const float* z;        // [T, H·P] or null
  const float* A;        // [H]
  const float* D;        // [H] or null
  const float* dt_bias;  // [H] or null
  float* out;            // [T, H·P]
  int64_t heads, head_dim, d_state, groups, conv_dim;
};

/// Scratch floats the chunked form needs for chunk length L and a block of `heads` heads (layout
/// in mamba2_chunk.inc; rows padded to 16 floats so the tile kernels never need masked loads).
inline int64_t mamba2_scratch_floats(int64_t L, int64_t heads, int64_t P, int64_t N) {
  const int64_t Lp = (L + 15) / 16 * 16, Pp = (P + 15) / 16 * 16;
  return heads * N * Pp + 2 * L * N + N * Lp + 2 * L * Lp + 3 * L * Pp + 2 * Lp;
}

// Tokens [t0, t0 + len) of heads [h0, h1), all of one group; state: head h0's [P, N] block of
// the slot, the block's other heads after it. chunk == 0 or len == 1: the sequential recurrence.
using Mamba2ScanFn = void(const Mamba2Scan& a, int64_t t0, int64_t len, int64_t h0, int64_t h1, int64_t chunk,
                          float* state, float* scratch);
namespace avx512 { Mamba2ScanFn mamba2_scan; }
namespace generic { Mamba2ScanFn mamba2_scan; }

}  // namespace attn::mixer
