// MixerBase::conv: the causal depthwise conv1d every conv mixer starts with, continuing each
// sequence's conv state (its last d_conv - 1 inputs) and leaving the new one behind. Checks, the
// task split and the state update here; the row loop in conv_kernel.inc.
#include <algorithm>
#include <vector>

#include "attn/error.hpp"
#include "mamba/conv_kernel.hpp"
#include "mamba/mixer_base.hpp"
#include "mamba/mixer_support.hpp"

namespace attn {

void mixer::MixerBase::conv(const MixerPlan& plan, const TensorView& x, MambaStateCache& state, const TensorView& out,
                     Workspace* workspace) const {
  const MixerConfig& c = params_.config;
  const int64_t dim = c.conv_dim();
  ATTN_REQUIRE(dim > 0, "mixer type", to_string(c.type), "a mixer with a convolution (not linear_attention)");
  Workspace own;
  const Scratch scratch = begin(plan, &state, workspace, own);
  mixer::check_input(x, "x", {plan.batch.num_tokens, dim});
  mixer::check_input(out, "conv out", {plan.batch.num_tokens, dim});
  ATTN_REQUIRE(out.data != x.data, "conv out", "aliases x", "a buffer distinct from x");
  run_conv(plan, x.ptr<const float>(), state, out.ptr<float>(), scratch);
}

void mixer::MixerBase::run_conv(const MixerPlan& plan, const float* x, MambaStateCache& state, float* out,
                         const Scratch& scratch) const {
  const MixerConfig& c = params_.config;
  const MixerBatch& md = plan.batch;
  const int64_t dim = c.conv_dim(), K = c.d_conv, Hs = K - 1;
  auto kernel = use_avx512() ? mixer::avx512::conv_rows : mixer::generic::conv_rows;
  const bool silu = mixer_type_info(c.type).conv_silu;
  // Task = (sequence, kConvTokens tokens), every channel (the plan's conv_first_task).
  const std::vector<int64_t>& first_task = plan.conv_first_task;
  mixer::parallel_tasks(first_task.back(), plan.threads, [&](int64_t task) {
    const int s = int(std::upper_bound(first_task.begin(), first_task.end(), task) - first_task.begin()) - 1;
    mixer::ConvRows r;
    r.x = x;
    r.y = out;
    r.taps = conv_taps_.data();
    r.bias = params_.conv_bias.empty() ? nullptr : params_.conv_bias.data();
    r.state = state.conv_slot(md.state_slots[s]);
    r.scratch = scratch.mine();
    r.dim = dim, r.K = K, r.t0 = md.query_start_loc[s];
    r.begin = (task - first_task[s]) * mixer::kConvTokens;
    r.end = std::min<int64_t>(md.query_len(s), r.begin + mixer::kConvTokens);
    r.has_initial_state = md.has_initial_state[s];
    r.silu = silu;
    kernel(r);
  });
  // The new states, once every task has read the old ones: the last Hs inputs of each sequence,
  // the oldest of them still from the old state when it has fewer than Hs tokens (ascending i
  // reads old[i + len] before anything overwrites it).
  mixer::parallel_tasks(md.num_seqs, plan.threads, [&](int64_t s) {
    const int64_t len = md.query_len(int(s)), t0 = md.query_start_loc[s];
    if (len == 0) return;
    float* st = state.conv_slot(md.state_slots[s]);
    const bool init = md.has_initial_state[s];
    for (int64_t ch = 0; ch < dim; ++ch) {
      for (int64_t i = 0; i < Hs; ++i) {
        const int64_t u = len - Hs + i;
        st[ch * Hs + i] = u >= 0 ? x[(t0 + u) * dim + ch] : (init ? st[ch * Hs + u + Hs] : 0.0f);
      }
    }
  });
}

}  // namespace attn
