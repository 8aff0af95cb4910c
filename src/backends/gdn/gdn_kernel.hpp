#pragma once
// Gated delta net (Qwen3-Next) over one sequence and a block of value heads: recurrent form for decode,
// chunked form for prefill (per-ISA builds).
#include <cstdint>

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
/// rows padded to 16 floats so the tile kernels never need masked loads); L == 0: the
/// recurrence's normalised q, k and δ.
inline int64_t gdn_scratch_floats(int64_t L, int64_t heads, int64_t dk, int64_t dv) {
  if (L == 0) return 2 * dk + dv;
  const int64_t Lp = (L + 15) / 16 * 16, dvp = (dv + 15) / 16 * 16;
  return heads * dk * dvp + 2 * L * dk + dk * Lp + 4 * L * Lp + 2 * L * dvp + 3 * Lp;
}

// Tokens [t0, t0 + len) of value heads [h0, h1), all of one key head; state: head h0's
// [dk, dv] block of the slot, the block's other heads after it. chunk == 0 or len == 1: the
// recurrence.
using GdnScanFn = void(const GdnScan& a, int64_t t0, int64_t len, int64_t h0, int64_t h1, int64_t chunk,
                       float* state, float* scratch);
namespace avx512 { GdnScanFn gdn_scan; }
namespace generic { GdnScanFn gdn_scan; }

}  // namespace attn::mixer
