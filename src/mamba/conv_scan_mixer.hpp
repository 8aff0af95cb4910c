#pragma once
// Internal: the convolve-then-scan skeleton every built-in mixer runs. run() checks the inputs
// against the type's row of the per-type table, runs the causal conv into the run's buffer
// (unless the type has none or the caller ran conv() already), then the backend's scan over its
// output. A backend supplies the scan and, where it differs, what the conv reads and writes.
#include <cstdint>

#include "attn/mamba.hpp"
#include "mamba/mixer_base.hpp"
#include "mamba/mixer_support.hpp"

namespace attn::mixer {

class ConvScanMixer : public MixerBase {
 public:
  using MixerBase::MixerBase;

 protected:
  void run_checked(const MixerPlan& plan, const MixerInputs& in, MambaStateCache& state, const TensorView& out,
                   const Scratch& scratch) const final;
  /// The scan over `x`, the conv output (in.x itself when the type has no conv or it already ran).
  virtual void scan(const MixerPlan& plan, const MixerInputs& in, const float* x, MambaStateCache& state,
                    const TensorView& out, const Scratch& scratch) const = 0;
  /// What the conv reads: in.x [T, conv_dim] (short_conv forms B ⊙ x first).
  virtual const float* conv_input(const MixerPlan& plan, const MixerInputs& in, const Scratch& scratch) const;
  /// Where the conv writes [T, conv_dim]: the run's buffer (short_conv: straight into out).
  virtual float* conv_output(const TensorView& out, const Scratch& scratch) const;

  int64_t scan_scratch_floats(int64_t len, int64_t head_block) const final;
  /// Per-thread scratch floats of one scan task over a chunk of `chunk` tokens (0: the recurrence).
  virtual int64_t chunk_scratch_floats(int64_t chunk, int64_t head_block) const { return 0; }

  /// shared_head_block over the state's heads for a batch of `num_seqs` sequences: heads per task,
  /// a divisor of `group` (consecutive heads sharing per-chunk work) and at most `cap`.
  int64_t head_block_of(int64_t group, int64_t cap, int32_t num_seqs, int threads) const {
    const int64_t heads = mixer_type_info(params_.config.type).ssm_state(params_.config).dims[0];
    return shared_head_block(group, cap, int64_t(num_seqs) * heads, threads);
  }
  /// The kernel of this mixer's build (fixed when it was created).
  template <typename Fn>
  Fn* kernel(Fn* avx512_build, Fn* generic_build) const {
    return use_avx512() ? avx512_build : generic_build;
  }
  /// for_each_seq_heads over the heads (mamba1: channels) of the ssm state, from the type's row.
  template <typename Scan>
  void for_each_head_block(const MixerPlan& plan, MambaStateCache& state, const Scratch& scratch, Scan&& scan) const {
    const MixerShape s = mixer_type_info(params_.config.type).ssm_state(params_.config);
    for_each_seq_heads(plan, state, s.dims[0], s.numel() / s.dims[0], scratch, scan);
  }
  /// A chunked-form kernel over every (sequence, head block): scan(args, t0, len, h0, h1, chunk, state, scratch).
  template <typename ScanFn, typename ScanArgs>
  void scan_head_blocks(const MixerPlan& plan, MambaStateCache& state, const Scratch& scratch, ScanFn* scan,
                        const ScanArgs& args) const {
    for_each_head_block(plan, state, scratch, [&](int64_t t0, int64_t len, int64_t h0, int64_t h1, float* S, float* task) {
      scan(args, t0, len, h0, h1, plan.chunk_size, S, task);
    });
  }

 private:
  /// Every input the type's row declares for this form (raw or convolved x), in its order.
  void check_inputs(int64_t tokens, const MixerInputs& in) const;
};

}  // namespace attn::mixer
