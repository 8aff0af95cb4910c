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

  void forward(const MixerInputs& in, MambaStateCache& state, const MixerBatch& md, const TensorView& out) override {
    check_common(state, md, out);
    const MixerConfig& c = params_.config;
    const int64_t T = md.num_tokens, H = c.num_heads, dk = c.head_k_dim, dv = c.head_v_dim;
    mixer::check_input(in.x, "q (x)", {T, H, dk});
    mixer::check_input(in.k, "k", {T, H, dk});
    mixer::check_input(in.v, "v", {T, H, dv});
    const mixer::LinearScan args{in.x.ptr<const float>(), in.k.ptr<const float>(), in.v.ptr<const float>(),
                                 params_.A.data(), out.ptr<float>(), params_.effective_scale(), H, dk, dv};
    auto scan = use_avx512() ? mixer::avx512::linear_scan : mixer::generic::linear_scan;
    const int64_t L = params_.chunk_size;
    // Heads share nothing here, but adjacent heads' q, k, v slices of a token row are adjacent:
    // a task takes up to 4 (four 36 KiB states at 96 × 96) so its rows stream in whole lines.
    const int64_t block = mixer::shared_head_block(H, 4, int64_t(md.num_seqs) * H, params_.num_threads);
    mixer::for_each_seq_heads(
        md, state, H, block, dk * dv, params_.num_threads,
        [&](int64_t len) { return len > 1 && L > 0 ? mixer::linear_scratch_floats(std::min(L, len), block, dk, dv) : 0; },
        [&](int64_t t0, int64_t len, int64_t h0, int64_t h1, float* S, float* scratch) {
          scan(args, t0, len, h0, h1, L, S, scratch);
        });
  }
};

}  // namespace
}  // namespace attn

attn::MixerDescriptor linear_mixer_descriptor() {
  return attn::mixer::make_descriptor<attn::LinearImpl>(
      "linear", "linear attention with per-head decay (lightning attention), state [heads, d_k, d_v]",
      attn::MambaType::linear_attention);
}
