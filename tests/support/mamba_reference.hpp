#pragma once
// fp64 sequential recurrences for every mixer type (the oracle the chunked / SIMD kernels are
// checked against), random mixer weights and inputs, and a slice helper for split-prefill tests.
#include <cstdint>
#include <string>
#include <vector>

#include "attn/mamba.hpp"
#include "support/test_support.hpp"

namespace attn::test {

/// Per-slot fp64 copies of a MambaStateCache ([slots][conv floats], [slots][ssm floats]).
struct RefMixerState {
  std::vector<std::vector<double>> conv, ssm;
};
RefMixerState ref_state_from(const MambaStateCache& cache);

/// The whole mixer (conv included, `in.x` before the conv) as a plain token-by-token recurrence
/// in fp64, for every sequence of `md`; updates `state` as the kernel should. Returns the output
/// row-major with the kernel's output shape.
std::vector<double> reference_mixer(const MixerParams& params, const MixerInputs& in, RefMixerState& state,
                                    const MixerBatch& md);

/// Tolerance of fp32 mixer kernels against the fp64 recurrence (recurrences accumulate more
/// rounding than one attention row, so it is looser than tolerance(float32, float32)).
Tolerance mixer_tolerance();

/// Owning storage for MixerInputs.
struct MixerData {
  MixerConfig config;
  int64_t num_tokens = 0;
  Buffer x, k, v, dt, B, C, b, z;
  MixerInputs inputs() const;
};
/// Random weights with decays in a realistic range (states neither vanish nor blow up).
MixerParams random_mixer_params(const MixerConfig& config, uint64_t seed, bool with_bias = true);
/// Random per-token inputs for `num_tokens` tokens (z only when `with_z` and the type has one).
MixerData random_mixer_inputs(const MixerConfig& config, int64_t num_tokens, uint64_t seed, bool with_z = true);
/// Rows [t0, t1) of every input.
MixerData slice_tokens(const MixerData& data, int64_t t0, int64_t t1);
/// Fills every state of the cache with random values (a non-zero initial state).
void randomize_states(MambaStateCache& cache, uint64_t seed, float range = 0.5f);

/// max |got - want| / (atol + rtol·|want|) over the elements; > 1 fails. NaN counts as failing.
struct MixerCompare {
  bool ok = true;
  double worst_ratio = 0, max_abs_err = 0;
  std::string message;
};
MixerCompare compare_values(const float* got, const std::vector<double>& want, Tolerance tol, const std::string& what);

}  // namespace attn::test
