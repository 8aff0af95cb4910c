// gdn: gated delta net (Qwen3-Next linear attention) — conv + SiLU over q|k|v, L2-normalised
// q/k, decay g = A·softplus(a + dt_bias), β = sigmoid(b); chunked prefill, recurrent decode.
// The output gate (RMSNormGated with z) belongs to the model, after this mixer.
#include <algorithm>

#include "attn/error.hpp"
#include "attn/mamba.hpp"
#include "backends/gdn/gdn_kernel.hpp"
#include "mamba/mixer_support.hpp"

namespace attn {
namespace {

class GdnImpl final : public MixerImpl {
 public:
  using MixerImpl::MixerImpl;

  void run_checked(const MixerPlan& plan, const MixerInputs& in, MambaStateCache& state, const TensorView& out,
                   const Scratch& scratch) const override {
    const MixerBatch& md = plan.batch;
    const MixerConfig& c = params_.config;
    const int64_t T = md.num_tokens, H = c.num_heads, dk = c.head_k_dim, dv = c.head_v_dim, CD = c.conv_dim();
    mixer::check_input(in.x, "qkv (x)", {T, CD});
    mixer::check_input(in.dt, "a (dt)", {T, H});
    mixer::check_input(in.b, "b", {T, H});
    const float* qkv = in.x.ptr<const float>();
    if (!in.x_is_convolved) {
      run_conv(plan, qkv, state, scratch.buffer, scratch);
      qkv = scratch.buffer;
    }
    const mixer::GdnScan args{qkv, in.dt.ptr<const float>(), in.b.ptr<const float>(), params_.A.data(),
                              params_.dt_bias.empty() ? nullptr : params_.dt_bias.data(), out.ptr<float>(),
                              params_.effective_scale(), H, c.num_k_heads, dk, dv, CD};
    auto scan = use_avx512() ? mixer::avx512::gdn_scan : mixer::generic::gdn_scan;
    mixer::scan_seq_heads(plan, state, H, dk * dv, scratch, scan, args);
  }

 protected:
  // Value heads of one key head share its normalised q, k and their products: a task takes up
  // to 8 of them so each chunk's K·Kᵀ and Q·Kᵀ are built once for all of them.
  int64_t plan_head_block(int32_t num_seqs, int threads) const override {
    const MixerConfig& c = params_.config;
    return mixer::shared_head_block(c.num_heads / c.num_k_heads, 8, int64_t(num_seqs) * c.num_heads, threads);
  }
  int64_t scan_scratch_floats(int64_t len, int64_t block) const override {
    const int64_t L = params_.chunk_size;
    const MixerConfig& c = params_.config;
    return mixer::gdn_scratch_floats(len > 1 && L > 0 ? std::min<int64_t>(L, len) : 0, block, c.head_k_dim, c.head_v_dim);
  }
};

}  // namespace
}  // namespace attn

attn::MixerDescriptor gdn_mixer_descriptor() {
  return attn::mixer::make_descriptor<attn::GdnImpl>(
      "gdn", "gated delta net (Qwen3-Next): conv + L2-normalised q/k, chunked delta rule prefill, recurrent decode",
      attn::MambaType::gdn_attention);
}
