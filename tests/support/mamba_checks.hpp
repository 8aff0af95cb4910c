#pragma once
// Conformance drivers every mixer backend's tests share: ragged batches against the fp64
// recurrence, and split prefill (prefill-then-decode == one long prefill).
#include <cstdint>
#include <string>
#include <vector>

#include "support/mamba_reference.hpp"

namespace attn::test {

/// The layer's output buffer for `T` tokens, NaN-poisoned.
Buffer poisoned_output(const MixerConfig& config, int64_t T);

/// One small layer of every built-in mixer backend (odd widths, several heads and groups).
struct SmallMixer {
  std::string backend;
  MixerConfig config;
};
std::vector<SmallMixer> small_mixers();

struct MixerCheck {
  bool ok = true;
  double worst_ratio = 0;  // worst |err| / tolerance over outputs and states
  std::string message;     // the seed and the first failure
};

/// One step over a ragged batch: sequence s has lens[s] new tokens, a random distinct slot among
/// lens.size() + 2 (spare slots stay NaN-poisoned and must stay untouched), and — for every
/// other sequence — a random non-zero initial state it continues. Output and every used slot's
/// final state are compared with the fp64 recurrence; output is NaN-poisoned before the run.
MixerCheck check_mixer_batch(const std::string& backend, const MixerConfig& config, const std::vector<int32_t>& lens,
                             uint64_t seed, int chunk_size = 64);

/// One sequence of `total` tokens from a non-zero initial state: once as one prefill, then as
/// pieces cut at `cuts` (a piece of 1 token is a decode step), each continuing the slot's state.
/// Both runs must match the fp64 recurrence, outputs and final state.
MixerCheck check_mixer_split(const std::string& backend, const MixerConfig& config, int total,
                             const std::vector<int>& cuts, uint64_t seed, int chunk_size = 64);

}  // namespace attn::test
