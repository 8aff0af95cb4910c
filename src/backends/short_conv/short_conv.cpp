// short_conv: LFM2's gated short convolution. BCx = in_proj(h) splits into B | C | x;
// y = C ⊙ conv(B ⊙ x), the conv causal and depthwise with no activation. The only state is the
// conv's last d_conv - 1 inputs (of B ⊙ x), so the whole mixer is memory-bound elementwise work.
#include "attn/mamba.hpp"
#include "mamba/conv_scan_mixer.hpp"

namespace attn {
namespace {

class ShortConvImpl final : public mixer::ConvScanMixer {
 public:
  using ConvScanMixer::ConvScanMixer;

 protected:
  // The conv reads B ⊙ x [T, D], formed in the run's buffer from BCx [T, 3·D].
  const float* conv_input(const MixerPlan& plan, const MixerInputs& in, const Scratch& scratch) const override {
    const int64_t D = params_.config.d_inner;
    const float* bcx = in.x.ptr<const float>();
    float* bx = scratch.buffer;
    mixer::parallel_tasks(plan.batch.num_tokens, plan.threads, [&](int64_t t) {
      const float* row = bcx + t * 3 * D;
#pragma omp simd
      for (int64_t i = 0; i < D; ++i) bx[t * D + i] = row[i] * row[2 * D + i];
    });
    return bx;
  }
  // The conv writes straight into `out`; the gate then scales it in place.
  float* conv_output(const TensorView& out, const Scratch&) const override { return out.ptr<float>(); }
  // No state to scan: the gate y = C ⊙ conv_out, C from BCx (or apart, once convolved).
  void scan(const MixerPlan& plan, const MixerInputs& in, const float* conv_out, MambaStateCache&, const TensorView& out,
            const Scratch&) const override {
    const int64_t D = params_.config.d_inner;
    const float* bcx = in.x_is_convolved ? nullptr : in.x.ptr<const float>();
    float* y = out.ptr<float>();
    mixer::parallel_tasks(plan.batch.num_tokens, plan.threads, [&](int64_t t) {
      const float* gate = bcx ? bcx + t * 3 * D + D : in.C.ptr<const float>() + t * D;
#pragma omp simd
      for (int64_t i = 0; i < D; ++i) y[t * D + i] = gate[i] * conv_out[t * D + i];
    });
  }
};

}  // namespace
}  // namespace attn

attn::MixerDescriptor short_conv_mixer_descriptor() {
  return attn::mixer::make_descriptor<attn::ShortConvImpl>(
      "short_conv", "LFM2 gated short convolution: y = C * conv(B * x), conv state only",
      attn::MambaType::short_conv);
}
