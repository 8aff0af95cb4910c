#pragma once
// `attn run`'s spot checks of one attention layer against the reference backend: the layer's
// last ordinary (absorbed, for MLA) forward, and MLA's expanded-form prefill when it ran.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "plan.hpp"
#include "workload.hpp"

namespace attn_cli {

/// What the checks need of the sample layer: its metadata and inputs of every step, and the
/// outputs of the last ordinary forward and of the expanded forward (step index -1 = none).
struct AttentionRecording {
  int layer = -1;
  std::vector<attn::BatchMetadata> mds;
  std::vector<StepInputs> inputs;
  int last_step = -1, expanded_step = -1;
  attn::Buffer last_out, expanded_out;
  /// Keeps this step's inputs and output; `expanded`: the output is the expanded form's.
  void record(const attn::BatchMetadata& md, StepInputs in, attn::Buffer out, bool expanded);
};

/// The first attention layer the reference can check (directly or in its oracle form); -1 with
/// `why_none` set when there is none.
int pick_sample_layer(const Plan& plan, const attn::Platform& platform, std::string& why_none);

/// The last ordinary forward against the reference replaying the same writes. Null when the
/// layer never ran one (an MLA prefill in the expanded form with no decode steps).
nlohmann::json spot_check(const AttentionRecording& rec, const LayerRunner& layer, const std::string& backend, Rng& rng);

/// MLA's expanded prefill against the reference in absorbed form: q_latent = W_UK[h]·q_nope
/// (with q_rope appended) through the reference, whose latent output is then up-projected by
/// W_UV[h]. Checks the expanded kernel with an independent algorithm. Null when it did not run.
nlohmann::json expanded_check(const AttentionRecording& rec, const LayerRunner& layer, const std::string& backend, Rng& rng);

}  // namespace attn_cli
