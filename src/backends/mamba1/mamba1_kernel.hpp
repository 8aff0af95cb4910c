#pragma once
// Mamba-1 selective scan over one sequence and a block of channels (per-ISA builds).
#include <cstdint>

namespace attn::mixer {

struct Mamba1Scan {
  const float* x;        // [T, d_inner], after the conv
  const float* dt;       // [T, d_inner], before dt_bias + softplus
  const float* B;        // [T, d_state]
  const float* C;        // [T, d_state]
  const float* z;        // [T, d_inner] or null
  const float* A;        // [d_inner, d_state]
  const float* D;        // [d_inner] or null
  const float* dt_bias;  // [d_inner] or null
  float* out;            // [T, d_inner]
  int64_t d_inner, d_state;
};

// Tokens [t0, t0 + len) of one sequence, channels [c0, c1); h: the slot's [d_inner, d_state].
namespace avx512 { void mamba1_scan(const Mamba1Scan& a, int64_t t0, int64_t len, int64_t c0, int64_t c1, float* h); }
namespace generic { void mamba1_scan(const Mamba1Scan& a, int64_t t0, int64_t len, int64_t c0, int64_t c1, float* h); }

}  // namespace attn::mixer
