#pragma once
// Gated delta net (Qwen3-Next) over one (sequence, value head): recurrent form for decode,
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

inline int64_t gdn_scratch_floats(int64_t L, int64_t dk, int64_t dv) { return 2 * L * dk + L * dv + 2 * L + 2 * dk + dv; }

// state: the slot's [dk, dv] block for value head h. chunk == 0 or len == 1: the recurrence.
namespace avx512 { void gdn_scan(const GdnScan& a, int64_t t0, int64_t len, int64_t h, int64_t chunk, float* state, float* scratch); }
namespace generic { void gdn_scan(const GdnScan& a, int64_t t0, int64_t len, int64_t h, int64_t chunk, float* state, float* scratch); }

}  // namespace attn::mixer
