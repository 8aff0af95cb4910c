#pragma once
// Gated delta net (Qwen3-Next) over one sequence and a block of value heads: recurrent form for decode,
// chunked form for prefill (per-ISA builds).
#include <cstdint>

#include "mamba/chunked_scan.hpp"

namespace attn::mixer {

struct GdnScan {
  const float* qkv;      // [T, conv_dim] after conv + SiLU: q [Hk·dk] | k [Hk·dk] | v [Hv·dv]
  const float* a;        // [T, Hv] before dt_bias + softplus
  const float* b;        // [T, Hv] before the sigmoid
  const float* A;        // [Hv] = -exp(A_log)
  const float* dt_bias;  // [Hv] or null
  float* out;            // [T, Hv, dv]
  float scale;
  int64_t v_heads, k_heads, dk, dv, conv_dim;
};

/// Scratch floats for chunk length L and a block of `heads` value heads (layout in gdn_chunk.inc,
/// rows padded: scratch_row); L == 0: the recurrence's normalised q, k and δ.
inline int64_t gdn_scratch_floats(int64_t L, int64_t heads, int64_t dk, int64_t dv) {
  if (L == 0) return 2 * dk + dv;
  const int64_t Lp = scratch_row(L), dvp = scratch_row(dv);
  return heads * dk * dvp + 2 * L * dk + dk * Lp + 4 * L * Lp + 2 * L * dvp + 3 * Lp;
}

// h0, h1: value heads, all of one key head; a head's state block: [dk, dv].
namespace avx512 { ChunkedScanFn<GdnScan> gdn_scan; }
namespace generic { ChunkedScanFn<GdnScan> gdn_scan; }

}  // namespace attn::mixer
