// mamba2: the SSD formulation — conv over xBC, scalar A per head, grouped B/C, chunked scan
// for prefill and a single-step update for decode.
#include "attn/mamba.hpp"
#include "backends/mamba2/mamba2_kernel.hpp"
#include "mamba/conv_scan_mixer.hpp"

namespace attn {
namespace {

class Mamba2Impl final : public mixer::ConvScanMixer {
 public:
  using ConvScanMixer::ConvScanMixer;

 protected:
  void scan(const MixerPlan& plan, const MixerInputs& in, const float* xbc, MambaStateCache& state, const TensorView& out,
            const Scratch& scratch) const override {
    const MixerConfig& c = params_.config;
    const mixer::Mamba2Scan args{xbc, in.dt.ptr<const float>(), in.z.ptr<const float>(), params_.A.data(),
                                 params_.D.empty() ? nullptr : params_.D.data(),
                                 params_.dt_bias.empty() ? nullptr : params_.dt_bias.data(), out.ptr<float>(),
                                 c.num_heads, c.head_dim, c.d_state, c.n_groups, c.conv_dim()};
    scan_head_blocks(plan, state, scratch, kernel(mixer::avx512::mamba2_scan, mixer::generic::mamba2_scan), args);
  }
  // Heads of a group share B and C: a task takes up to 8 of them (8 transposed states, 256 KiB
  // at P = 64, N = 128, stay in L2) so each chunk's C·Bᵀ is built once for all of them.
  int64_t plan_head_block(int32_t num_seqs, int threads) const override {
    return head_block_of(params_.config.num_heads / params_.config.n_groups, 8, num_seqs, threads);
  }
  int64_t chunk_scratch_floats(int64_t chunk, int64_t block) const override {
    const MixerConfig& c = params_.config;
    return chunk ? mixer::mamba2_scratch_floats(chunk, block, c.head_dim, c.d_state) : 0;
  }
};

}  // namespace
}  // namespace attn

attn::MixerDescriptor mamba2_mixer_descriptor() {
  return attn::mixer::make_descriptor<attn::Mamba2Impl>(
      "mamba2", "Mamba-2 SSD: conv over xBC, scalar A per head, grouped B/C, chunked prefill, 1-step decode",
      attn::MambaType::mamba2);
}
