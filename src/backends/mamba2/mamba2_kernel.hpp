#pragma once
// Mamba-2 (SSD) scan over one (sequence, head): single-step recurrence for decode, chunked
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

/// Scratch floats the chunked form needs for chunk length L.
inline int64_t mamba2_scratch_floats(int64_t L) { return 3 * L + L * L; }

// Tokens [t0, t0 + len) of head `h`; state: the slot's [P, N] block for this head.
// chunk == 0 or len == 1: the sequential recurrence.
namespace avx512 { void mamba2_scan(const Mamba2Scan& a, int64_t t0, int64_t len, int64_t h, int64_t chunk, float* state, float* scratch); }
namespace generic { void mamba2_scan(const Mamba2Scan& a, int64_t t0, int64_t len, int64_t h, int64_t chunk, float* state, float* scratch); }

}  // namespace attn::mixer
