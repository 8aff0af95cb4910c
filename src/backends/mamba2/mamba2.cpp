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

  void forward(const MixerInputs& in, MambaStateCache& state, const MixerBatch& md, const TensorView& out) override {
    check_common(state, md, out);
    const MixerConfig& c = params_.config;
    const int64_t T = md.num_tokens, H = c.num_heads, P = c.head_dim, N = c.d_state, CD = c.conv_dim();
    mixer::check_input(in.x, "x", {T, CD});
    mixer::check_input(in.dt, "dt", {T, H});
    if (in.z.data) mixer::check_input(in.z, "z", {T, H * P});
    const float* xbc = in.x.ptr<const float>();
    if (!in.x_is_convolved) {
      float* conv_out = mixer::forward_buffer(T * CD);
      conv(in.x, state, md, TensorView::contiguous(conv_out, DType::float32, {T, CD}));
      xbc = conv_out;
    }
    const mixer::Mamba2Scan args{xbc, in.dt.ptr<const float>(), in.z.ptr<const float>(), params_.A.data(),
                                 params_.D.empty() ? nullptr : params_.D.data(),
                                 params_.dt_bias.empty() ? nullptr : params_.dt_bias.data(), out.ptr<float>(),
                                 H, P, N, c.n_groups, CD};
    auto scan = use_avx512() ? mixer::avx512::mamba2_scan : mixer::generic::mamba2_scan;
    const int64_t L = params_.chunk_size;
    // Heads of a group share B and C: a task takes up to 8 of them (8 transposed states, 256 KiB
    // at P = 64, N = 128, stay in L2) so each chunk's C·Bᵀ is built once for all of them.
    const int64_t block = mixer::shared_head_block(H / c.n_groups, 8, int64_t(md.num_seqs) * H, params_.num_threads);
    mixer::for_each_seq_heads(
        md, state, H, block, P * N, params_.num_threads,
        [&](int64_t len) { return len > 1 && L > 0 ? mixer::mamba2_scratch_floats(std::min(L, len), block, P, N) : 0; },
        [&](int64_t t0, int64_t len, int64_t h0, int64_t h1, float* S, float* scratch) {
          scan(args, t0, len, h0, h1, L, S, scratch);
        });
  }
};

}  // namespace
}  // namespace attn

attn::MixerDescriptor mamba2_mixer_descriptor() {
  return attn::mixer::make_descriptor<attn::Mamba2Impl>(
      "mamba2", "Mamba-2 SSD: conv over xBC, scalar A per head, grouped B/C, chunked prefill, 1-step decode",
      attn::MambaType::mamba2);
}
