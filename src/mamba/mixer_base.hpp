#pragma once
// Internal: what every built-in mixer shares behind the public MixerImpl interface — the plan,
// the per-layer checks of run() and conv(), the per-thread scratch carved from the Workspace,
// the conv, and the kernel build fixed at creation. The convolve-then-scan skeleton on top of it
// is conv_scan_mixer.hpp.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attn/mamba.hpp"

namespace attn::mixer {

class MixerBase : public MixerImpl {
 public:
  /// Validates `params`, fixes the kernel build and transposes the conv taps once.
  explicit MixerBase(MixerParams params);

  std::shared_ptr<const MixerPlan> plan(const MixerBatch& md, int32_t num_slots) const final;
  void run(const MixerPlan& plan, const MixerArgs& args) const final;
  using MixerImpl::conv;
  void conv(const MixerPlan& plan, const TensorView& x, MambaStateCache& state, const TensorView& out,
            Workspace* workspace = nullptr) const final;
  std::string variant() const final;

 protected:
  /// Per-thread scratch of one run: block omp_get_thread_num() of the workspace.
  struct Scratch {
    char* base = nullptr;
    std::size_t stride = 0;
    float* buffer = nullptr;  // the plan's buffer_floats
    float* mine() const;
  };
  /// The per-layer checks of run() and conv(): the plan is this layer's, the state cache has the
  /// planned config and slots. Returns the run's scratch (in `workspace`, or `own` when null).
  Scratch begin(const MixerPlan& plan, MambaStateCache* state, Workspace* workspace, Workspace& own) const;
  /// The backend's run once the plan, state and out passed the checks (inputs still unchecked).
  virtual void run_checked(const MixerPlan& plan, const MixerInputs& in, MambaStateCache& state, const TensorView& out,
                           const Scratch& scratch) const = 0;
  /// Heads (mamba1: channels) per scan task for a batch of `num_seqs` sequences.
  virtual int64_t plan_head_block(int32_t num_seqs, int threads) const;
  /// Per-thread scratch floats of one scan task over a sequence of `len` tokens.
  virtual int64_t scan_scratch_floats(int64_t len, int64_t head_block) const;
  /// The conv under a plan whose checks passed (run() and conv() share it).
  void run_conv(const MixerPlan& plan, const float* x, MambaStateCache& state, float* out, const Scratch& scratch) const;
  bool use_avx512() const { return avx512_; }

 private:
  bool avx512_ = false;
  std::vector<float> conv_taps_;  // [d_conv, conv_dim]: conv_weight transposed once, for conv()
};

}  // namespace attn::mixer
