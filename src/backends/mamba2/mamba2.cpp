// mamba2: the SSD formulation — conv over xBC, scalar A per head, grouped B/C, chunked scan
// for prefill and a single-step update for decode.
#include <algorithm>

#include "attn/error.hpp"
#include "attn/mamba.hpp"
#include "backends/mamba2/mamba2_kernel.hpp"
#include "mamba/mixer_support.hpp"

namespace attn {
namespace {

class Mamba2Impl final : public MixerImpl {
 public:
  using MixerImpl::MixerImpl;

  void run_checked(const MixerPlan& plan, const MixerInputs& in, MambaStateCache& state, const TensorView& out,
                   const Scratch& scratch) const override {
    const MixerBatch& md = plan.batch;
    const MixerConfig& c = params_.config;
    const int64_t T = md.num_tokens, H = c.num_heads, P = c.head_dim, N = c.d_state, CD = c.conv_dim();
    mixer::check_input(in.x, "x", {T, CD});
    mixer::check_input(in.dt, "dt", {T, H});
    if (in.z.data) mixer::check_input(in.z, "z", {T, H * P});
    const float* xbc = in.x.ptr<const float>();
    if (!in.x_is_convolved) {
      run_conv(plan, xbc, state, scratch.buffer, scratch);
      xbc = scratch.buffer;
    }
    const mixer::Mamba2Scan args{xbc, in.dt.ptr<const float>(), in.z.ptr<const float>(), params_.A.data(),
                                 params_.D.empty() ? nullptr : params_.D.data(),
                                 params_.dt_bias.empty() ? nullptr : params_.dt_bias.data(), out.ptr<float>(),
                                 H, P, N, c.n_groups, CD};
    auto scan = use_avx512() ? mixer::avx512::mamba2_scan : mixer::generic::mamba2_scan;
    mixer::scan_seq_heads(plan, state, H, P * N, scratch, scan, args);
  }

 protected:
  // Heads of a group share B and C: a task takes up to 8 of them (8 transposed states, 256 KiB
  // at P = 64, N = 128, stay in L2) so each chunk's C·Bᵀ is built once for all of them.
  int64_t plan_head_block(int32_t num_seqs, int threads) const override {
    const MixerConfig& c = params_.config;
    return mixer::shared_head_block(c.num_heads / c.n_groups, 8, int64_t(num_seqs) * c.num_heads, threads);
  }
  int64_t scan_scratch_floats(int64_t len, int64_t block) const override {
    const int64_t L = params_.chunk_size;
    const MixerConfig& c = params_.config;
    return len > 1 && L > 0 ? mixer::mamba2_scratch_floats(std::min<int64_t>(L, len), block, c.head_dim, c.d_state) : 0;
  }
};

}  // namespace
}  // namespace attn

attn::MixerDescriptor mamba2_mixer_descriptor() {
  return attn::mixer::make_descriptor<attn::Mamba2Impl>(
      "mamba2", "Mamba-2 SSD: conv over xBC, scalar A per head, grouped B/C, chunked prefill, 1-step decode",
      attn::MambaType::mamba2);
}
