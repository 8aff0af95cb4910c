#pragma once
// Linear attention with per-head decay (MiniMax lightning-attention style) over one
// sequence and a block of heads: recurrent form for decode, chunked form for prefill (per-ISA builds).
#include <cstdint>

#include "mamba/chunked_scan.hpp"

namespace attn::mixer {

struct LinearScan {
  const float *q, *k, *v;  // [T, H, dk], [T, H, dk], [T, H, dv]
  const float* A;          // [H] log decay per token (<= 0)
  float* out;              // [T, H, dv]
  float scale;
  int64_t heads, dk, dv;
};

/// Scratch floats the chunked form needs for chunk length L and a block of `heads` heads (layout
/// in linear_chunk.inc; rows padded: scratch_row).
inline int64_t linear_scratch_floats(int64_t L, int64_t heads, int64_t dk, int64_t dv) {
  const int64_t Lp = scratch_row(L), dvp = scratch_row(dv);
  return heads * dk * dvp + 2 * L * dk + dk * Lp + 3 * L * dvp + L * Lp + Lp + 1;
}

// A head's state block: [dk, dv].
namespace avx512 { ChunkedScanFn<LinearScan> linear_scan; }
namespace generic { ChunkedScanFn<LinearScan> linear_scan; }

}  // namespace attn::mixer
