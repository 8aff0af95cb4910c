#pragma once
// Mamba-2 (SSD) scan over one sequence and a block of heads: single-step recurrence for decode, chunked
// form for prefill (per-ISA builds).
#include <cstdint>

#include "mamba/chunked_scan.hpp"

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
/// in mamba2_chunk.inc; rows padded: scratch_row).
inline int64_t mamba2_scratch_floats(int64_t L, int64_t heads, int64_t P, int64_t N) {
  const int64_t Lp = scratch_row(L), Pp = scratch_row(P);
  return heads * N * Pp + 2 * L * N + N * Lp + 2 * L * Lp + 3 * L * Pp + 2 * Lp;
}

// h0, h1: heads of one group; a head's state block: [P, N].
namespace avx512 { ChunkedScanFn<Mamba2Scan> mamba2_scan; }
namespace generic { ChunkedScanFn<Mamba2Scan> mamba2_scan; }

}  // namespace attn::mixer
