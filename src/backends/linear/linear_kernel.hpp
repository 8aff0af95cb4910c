#pragma once
// Linear attention with per-head decay (MiniMax lightning-attention style) over one
// (sequence, head): recurrent form for decode, chunked form for prefill (per-ISA builds).
#include <cstdint>

namespace attn::mixer {

struct LinearScan {
  const float *q, *k, *v;  // [T, H, dk], [T, H, dk], [T, H, dv]
  const float* A;          // [H] log decay per token (<= 0)
  float* out;              // [T, H, dv]
  float scale;
  int64_t heads, dk, dv;
};

inline int64_t linear_scratch_floats(int64_t L) { return (L + 1) + L; }

// state: the slot's [dk, dv] block for head h. chunk == 0 or len == 1: the recurrence.
namespace avx512 { void linear_scan(const LinearScan& a, int64_t t0, int64_t len, int64_t h, int64_t chunk, float* state, float* scratch); }
namespace generic { void linear_scan(const LinearScan& a, int64_t t0, int64_t len, int64_t h, int64_t chunk, float* state, float* scratch); }

}  // namespace attn::mixer
