// linear: linear attention with a per-head decay (MiniMax lightning attention), state
// [heads, d_k, d_v]; chunked prefill, recurrent decode. q, k, v arrive activated.
#include "attn/mamba.hpp"
#include "backends/linear/linear_kernel.hpp"
#include "mamba/conv_scan_mixer.hpp"

namespace attn {
namespace {

class LinearImpl final : public mixer::ConvScanMixer {
 public:
  using ConvScanMixer::ConvScanMixer;

 protected:
  // No conv: q arrives as in.x.
  void scan(const MixerPlan& plan, const MixerInputs& in, const float* q, MambaStateCache& state, const TensorView& out,
            const Scratch& scratch) const override {
    const MixerConfig& c = params_.config;
    const mixer::LinearScan args{q, in.k.ptr<const float>(), in.v.ptr<const float>(), params_.A.data(), out.ptr<float>(),
                                 params_.effective_scale(), c.num_heads, c.head_k_dim, c.head_v_dim};
    scan_head_blocks(plan, state, scratch, kernel(mixer::avx512::linear_scan, mixer::generic::linear_scan), args);
  }
  // Heads share nothing here, but adjacent heads' q, k, v slices of a token row are adjacent:
  // a task takes up to 4 (four 36 KiB states at 96 × 96) so its rows stream in whole lines.
  int64_t plan_head_block(int32_t num_seqs, int threads) const override {
    return head_block_of(params_.config.num_heads, 4, num_seqs, threads);
  }
  int64_t chunk_scratch_floats(int64_t chunk, int64_t block) const override {
    const MixerConfig& c = params_.config;
    return chunk ? mixer::linear_scratch_floats(chunk, block, c.head_k_dim, c.head_v_dim) : 0;
  }
};

}  // namespace
}  // namespace attn

attn::MixerDescriptor linear_mixer_descriptor() {
  return attn::mixer::make_descriptor<attn::LinearImpl>(
      "linear", "linear attention with per-head decay (lightning attention), state [heads, d_k, d_v]",
      attn::MambaType::linear_attention);
}
