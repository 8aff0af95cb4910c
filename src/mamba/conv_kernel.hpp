#pragma once
// The causal depthwise conv1d over a range of one sequence's tokens, every channel (per-ISA
// builds: the SiLU's exp only vectorizes where the ISA has masked selects for its clamps).
#include <cstdint>

namespace attn::mixer {

struct ConvRows {
  const float* x;       // [T, dim] input rows
  float* y;             // [T, dim] output rows
  const float* taps;    // [K, dim] the conv weight transposed: tap k of every channel in a row
  const float* bias;    // [dim] or null
  const float* state;   // [dim, K - 1] the sequence's conv state before this step, oldest first
  float* scratch;       // conv_scratch_floats(dim, K)
  int64_t dim, K;
  int64_t t0;           // the sequence's first row in x / y
  int64_t begin, end;   // tokens [begin, end) of the sequence
  bool has_initial_state, silu;
};

inline int64_t conv_scratch_floats(int64_t dim, int64_t K) { return (K - 1) * dim + 256; }

namespace avx512 { void conv_rows(const ConvRows& r); }
namespace generic { void conv_rows(const ConvRows& r); }

}  // namespace attn::mixer
