#pragma once
// What `run` needs for Mamba-family mixer layers: random weights and activations of the layer's
// shapes, one layer driven step by step over its own MambaStateCache, and the spot check of a
// mixer layer against the same backend's sequential recurrence fed one token per call.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attn/mamba.hpp"
#include "workload.hpp"

namespace attn_cli {

/// Weights of one mixer layer with decays in a realistic range (states neither vanish nor blow
/// up over a few hundred tokens), as a trained layer would have.
attn::MixerParams random_mixer_params(const attn::MixerConfig& config, int threads, Rng& rng);

/// One step's projected inputs for a mixer layer (float32, contiguous), owning their storage.
struct MixerStepInputs {
  attn::Buffer x, k, v, dt, B, C, b, z;  // the ones the layer type reads; the rest stay empty
  attn::MixerInputs inputs() const;
  /// Rows `rows` (token indices) of every input, in that order.
  MixerStepInputs gather(const std::vector<int32_t>& rows) const;
};
MixerStepInputs random_mixer_inputs(const attn::MixerConfig& config, int32_t num_tokens, Rng& rng);
/// [T, out_dim] (mamba1, mamba2, short_conv) or [T, num_heads, head_v_dim] (linear, gdn).
attn::Buffer make_mixer_output(const attn::MixerConfig& config, int32_t num_tokens);

/// The batch's sequences as every mixer layer sees them: sequence s owns state slot s; the
/// prefill starts from a zero state, every later step continues the slot.
struct MixerSequences {
  int32_t num_seqs = 0;
  bool started = false;
  attn::MixerBatch md;
  /// This step's batch metadata for `n` new tokens per sequence.
  void advance(int32_t n);
};

/// One mixer layer served by one backend, with its per-slot state cache.
class MixerRunner {
 public:
  MixerRunner(const std::string& backend, const attn::MixerParams& params, int32_t num_slots);
  /// This step's plan (shared by every layer whose plan_key() is equal).
  std::shared_ptr<const attn::MixerPlan> plan(const attn::MixerBatch& md) const;
  /// Layers with equal keys share one plan: same backend, config, chunk size and threads.
  bool shares_plan(const attn::MixerPlan& plan) const;
  void run(const attn::MixerPlan& plan, const MixerStepInputs& in, const attn::TensorView& out, attn::Workspace* workspace);
  /// plan + run (the spot check's one-token calls).
  void forward(const attn::MixerBatch& md, const MixerStepInputs& in, const attn::TensorView& out);
  const attn::MixerParams& params() const { return params_; }
  const std::string& backend() const { return backend_; }
  const attn::MambaStateCache& state() const { return *state_; }
  std::size_t state_bytes() const { return state_->bytes(); }
  std::string variant() const { return impl_->variant(); }

 private:
  std::string backend_;
  attn::MixerParams params_;
  std::unique_ptr<attn::MixerImpl> impl_;
  std::unique_ptr<attn::MambaStateCache> state_;
};

/// Every step one mixer layer ran: its metadata, inputs and outputs.
struct MixerRecording {
  int layer = -1;
  std::vector<attn::MixerBatch> mds;
  std::vector<MixerStepInputs> inputs;
  std::vector<attn::Buffer> outputs;
};

/// Replays the recorded steps through a fresh instance of the same backend with chunk_size 0
/// (the sequential recurrence), one token per sequence per call, and compares every output and
/// the final states with what the layer produced: an independent algorithm for the chunked
/// prefill forms, and a check that prefill-then-decode equals token-by-token state carrying.
nlohmann::json mixer_spot_check(const MixerRecording& rec, const MixerRunner& layer);

}  // namespace attn_cli
