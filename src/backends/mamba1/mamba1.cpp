// mamba1: causal depthwise conv1d + selective scan (softplus Δ, diagonal A, D skip, z gate).
#include "attn/mamba.hpp"
#include "backends/mamba1/mamba1_kernel.hpp"
#include "mamba/conv_scan_mixer.hpp"

namespace attn {
namespace {

class Mamba1Impl final : public mixer::ConvScanMixer {
 public:
  using ConvScanMixer::ConvScanMixer;

 protected:
  void scan(const MixerPlan& plan, const MixerInputs& in, const float* x, MambaStateCache& state, const TensorView& out,
            const Scratch& scratch) const override {
    const MixerConfig& c = params_.config;
    const int64_t N = c.d_state;
    const mixer::Mamba1Scan args{x, in.dt.ptr<const float>(), in.B.ptr<const float>(), in.C.ptr<const float>(),
                                 in.z.ptr<const float>(), params_.A.data(),
                                 params_.D.empty() ? nullptr : params_.D.data(),
                                 params_.dt_bias.empty() ? nullptr : params_.dt_bias.data(), out.ptr<float>(), c.d_inner, N};
    auto* scan = kernel(mixer::avx512::mamba1_scan, mixer::generic::mamba1_scan);
    // The kernel indexes channels c0..c1 of the whole slot: h is the slot, not channel c0's block.
    for_each_head_block(plan, state, scratch, [&](int64_t t0, int64_t len, int64_t c0, int64_t c1, float* h, float*) {
      scan(args, t0, len, c0, c1, h - c0 * N);
    });
  }
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
