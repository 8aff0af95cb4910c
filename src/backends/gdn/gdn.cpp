// gdn: gated delta net (Qwen3-Next linear attention) — conv + SiLU over q|k|v, L2-normalised
// q/k, decay g = A·softplus(a + dt_bias), β = sigmoid(b); chunked prefill, recurrent decode.
// The output gate (RMSNormGated with z) belongs to the model, after this mixer.
#include "attn/mamba.hpp"
#include "backends/gdn/gdn_kernel.hpp"
#include "mamba/conv_scan_mixer.hpp"

namespace attn {
namespace {

class GdnImpl final : public mixer::ConvScanMixer {
 public:
  using ConvScanMixer::ConvScanMixer;

 protected:
  void scan(const MixerPlan& plan, const MixerInputs& in, const float* qkv, MambaStateCache& state, const TensorView& out,
            const Scratch& scratch) const override {
    const MixerConfig& c = params_.config;
    const mixer::GdnScan args{qkv, in.dt.ptr<const float>(), in.b.ptr<const float>(), params_.A.data(),
                              params_.dt_bias.empty() ? nullptr : params_.dt_bias.data(), out.ptr<float>(),
                              params_.effective_scale(), c.num_heads, c.num_k_heads, c.head_k_dim, c.head_v_dim,
                              c.conv_dim()};
    scan_head_blocks(plan, state, scratch, kernel(mixer::avx512::gdn_scan, mixer::generic::gdn_scan), args);
  }
  // Value heads of one key head share its normalised q, k and their products: a task takes up
  // to 8 of them so each chunk's K·Kᵀ and Q·Kᵀ are built once for all of them.
  int64_t plan_head_block(int32_t num_seqs, int threads) const override {
    return head_block_of(params_.config.num_heads / params_.config.num_k_heads, 8, num_seqs, threads);
  }
  // The recurrence (chunk 0) needs scratch too: the normalised q, k and δ.
  int64_t chunk_scratch_floats(int64_t chunk, int64_t block) const override {
    const MixerConfig& c = params_.config;
    return mixer::gdn_scratch_floats(chunk, block, c.head_k_dim, c.head_v_dim);
  }
};

}  // namespace
}  // namespace attn

attn::MixerDescriptor gdn_mixer_descriptor() {
  return attn::mixer::make_descriptor<attn::GdnImpl>(
      "gdn", "gated delta net (Qwen3-Next): conv + L2-normalised q/k, chunked delta rule prefill, recurrent decode",
      attn::MambaType::gdn_attention);
}
