// short_conv: LFM2's gated short convolution. BCx = in_proj(h) splits into B | C | x;
// y = C ⊙ conv(B ⊙ x), the conv causal and depthwise with no activation. The only state is the
// conv's last d_conv - 1 inputs (of B ⊙ x), so the whole mixer is memory-bound elementwise work.
#include "attn/error.hpp"
#include "attn/mamba.hpp"
#include "mamba/mixer_support.hpp"

namespace attn {
namespace {

class ShortConvImpl final : public MixerImpl {
 public:
  using MixerImpl::MixerImpl;

  void run_checked(const MixerPlan& plan, const MixerInputs& in, MambaStateCache& state, const TensorView& out,
                   const Scratch& scratch) const override {
    const MixerBatch& md = plan.batch;
    const int64_t T = md.num_tokens, D = params_.config.d_inner;
    float* bx_buf = nullptr;
    const float* bcx = nullptr;
    if (in.x_is_convolved) {
      // x already holds conv(B ⊙ x) [T, D]; C comes separately.
      mixer::check_input(in.x, "x", {T, D});
      mixer::check_input(in.C, "C", {T, D});
    } else {
      mixer::check_input(in.x, "BCx (x)", {T, 3 * D});
      bcx = in.x.ptr<const float>();
      bx_buf = scratch.buffer;
      mixer::parallel_tasks(T, plan.threads, [&](int64_t t) {
        const float* row = bcx + t * 3 * D;
#pragma omp simd
        for (int64_t i = 0; i < D; ++i) bx_buf[t * D + i] = row[i] * row[2 * D + i];
      });
      // conv writes its output straight into `out`; the gate then scales it in place.
      run_conv(plan, bx_buf, state, out.ptr<float>(), scratch);
    }
    float* y = out.ptr<float>();
    const float* conv_out = in.x_is_convolved ? in.x.ptr<const float>() : y;
    mixer::parallel_tasks(T, plan.threads, [&](int64_t t) {
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
