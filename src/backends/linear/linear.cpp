// linear: linear attention with a per-head decay (MiniMax lightning attention), state
// [heads, d_k, d_v]; chunked prefill, recurrent decode. q, k, v arrive activated.
#include <algorithm>

#include "attn/error.hpp"
#include "attn/mamba.hpp"
#include "backends/linear/linear_kernel.hpp"
#include "mamba/mixer_support.hpp"

namespace attn {
namespace {

class LinearImpl final : public MixerImpl {
 public:
  using MixerImpl::MixerImpl;

  void run_checked(const MixerPlan& plan, const MixerInputs& in, MambaStateCache& state, const TensorView& out,
                   const Scratch& scratch) const override {
    const MixerBatch& md = plan.batch;
    const MixerConfig& c = params_.config;
    const int64_t T = md.num_tokens, H = c.num_heads, dk = c.head_k_dim, dv = c.head_v_dim;
    mixer::check_input(in.x, "q (x)", {T, H, dk});
    mixer::check_input(in.k, "k", {T, H, dk});
    mixer::check_input(in.v, "v", {T, H, dv});
    const mixer::LinearScan args{in.x.ptr<const float>(), in.k.ptr<const float>(), in.v.ptr<const float>(),
                                 params_.A.data(), out.ptr<float>(), params_.effective_scale(), H, dk, dv};
    auto scan = use_avx512() ? mixer::avx512::linear_scan : mixer::generic::linear_scan;
    mixer::scan_seq_heads(plan, state, H, dk * dv, scratch, scan, args);
  }

 protected:
  // Heads share nothing here, but adjacent heads' q, k, v slices of a token row are adjacent:
  // a task takes up to 4 (four 36 KiB states at 96 × 96) so its rows stream in whole lines.
  int64_t plan_head_block(int32_t num_seqs, int threads) const override {
    const int64_t H = params_.config.num_heads;
    return mixer::shared_head_block(H, 4, int64_t(num_seqs) * H, threads);
  }
  int64_t scan_scratch_floats(int64_t len, int64_t block) const override {
    const int64_t L = params_.chunk_size;
    const MixerConfig& c = params_.config;
    return len > 1 && L > 0 ? mixer::linear_scratch_floats(std::min<int64_t>(L, len), block, c.head_k_dim, c.head_v_dim) : 0;
  }
};

}  // namespace
}  // namespace attn

attn::MixerDescriptor linear_mixer_descriptor() {
  return attn::mixer::make_descriptor<attn::LinearImpl>(
      "linear", "linear attention with per-head decay (lightning attention), state [heads, d_k, d_v]",
      attn::MambaType::linear_attention);
}
