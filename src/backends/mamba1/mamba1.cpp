// mamba1: causal depthwise conv1d + selective scan (softplus Δ, diagonal A, D skip, z gate).
#include <algorithm>

#include "attn/error.hpp"
#include "attn/mamba.hpp"
#include "backends/mamba1/mamba1_kernel.hpp"
#include "mamba/mixer_support.hpp"

namespace attn {
namespace {

class Mamba1Impl final : public MixerImpl {
 public:
  using MixerImpl::MixerImpl;

  void run_checked(const MixerPlan& plan, const MixerInputs& in, MambaStateCache& state, const TensorView& out,
                   const Scratch& scratch) const override {
    const MixerBatch& md = plan.batch;
    const MixerConfig& c = params_.config;
    const int64_t T = md.num_tokens, D = c.d_inner, N = c.d_state;
    mixer::check_input(in.x, "x", {T, D});
    mixer::check_input(in.dt, "dt", {T, D});
    mixer::check_input(in.B, "B", {T, N});
    mixer::check_input(in.C, "C", {T, N});
    if (in.z.data) mixer::check_input(in.z, "z", {T, D});
    const float* x = in.x.ptr<const float>();
    if (!in.x_is_convolved) {
      run_conv(plan, x, state, scratch.buffer, scratch);
      x = scratch.buffer;
    }
    const mixer::Mamba1Scan args{x, in.dt.ptr<const float>(), in.B.ptr<const float>(), in.C.ptr<const float>(),
                                 in.z.ptr<const float>(), params_.A.data(),
                                 params_.D.empty() ? nullptr : params_.D.data(),
                                 params_.dt_bias.empty() ? nullptr : params_.dt_bias.data(), out.ptr<float>(), D, N};
    auto scan = use_avx512() ? mixer::avx512::mamba1_scan : mixer::generic::mamba1_scan;
    const int64_t kBlock = plan.head_block, blocks = (D + kBlock - 1) / kBlock;
    mixer::parallel_tasks(int64_t(md.num_seqs) * blocks, plan.threads, [&](int64_t task) {
      const int s = int(task / blocks);
      const int64_t c0 = (task % blocks) * kBlock, c1 = std::min(D, c0 + kBlock);
      if (md.query_len(s) == 0) return;
      float* h = state.ssm_slot(md.state_slots[s]);
      if (!md.has_initial_state[s]) std::fill(h + c0 * N, h + c1 * N, 0.0f);
      scan(args, md.query_start_loc[s], md.query_len(s), c0, c1, h);
    });
  }

 protected:
  // Channels per task: enough tasks for the threads at decode. The scan needs no scratch.
  int64_t plan_head_block(int32_t, int) const override { return 32; }
};

}  // namespace
}  // namespace attn

attn::MixerDescriptor mamba1_mixer_descriptor() {
  return attn::mixer::make_descriptor<attn::Mamba1Impl>(
      "mamba1", "Mamba-1: causal conv1d + selective scan (softplus dt, diagonal A, D skip, z gate)",
      attn::MambaType::mamba1);
}
