// MixerImpl::conv: the causal depthwise conv1d every conv mixer starts with, continuing each
// sequence's conv state (its last d_conv - 1 inputs) and leaving the new one behind. Checks, the
// task split and the state update here; the row loop in conv_kernel.inc.
#include <algorithm>
#include <vector>

#include "attn/error.hpp"
#include "mamba/conv_kernel.hpp"
#include "mamba/mixer_support.hpp"

namespace attn {

void MixerImpl::conv(const TensorView& x, MambaStateCache& state, const MixerBatch& md, const TensorView& out) const {
  const MixerConfig& c = params_.config;
  const int64_t dim = c.conv_dim();
  require(dim > 0, "mixer type", to_string(c.type), "a mixer with a convolution (not linear_attention)");
  require(state.config() == c, "state.config", state.config().to_string(), "the layer's " + c.to_string());
  md.validate(state.num_slots());
  mixer::check_input(x, "x", {md.num_tokens, dim});
  mixer::check_input(out, "conv out", {md.num_tokens, dim});
  require(out.data != x.data, "conv out", "aliases x", "a buffer distinct from x");
  const int64_t K = c.d_conv, Hs = K - 1;
  auto kernel = use_avx512() ? mixer::avx512::conv_rows : mixer::generic::conv_rows;
  // Task = (sequence, 32 tokens), every channel: token ranges are independent (a token's taps
  // read inputs, never outputs), so a long prefill splits over all threads whatever its width.
  constexpr int64_t kTokens = 32;
  std::vector<int64_t> first_task(std::size_t(md.num_seqs) + 1, 0);
  for (int s = 0; s < md.num_seqs; ++s) first_task[s + 1] = first_task[s] + (md.query_len(s) + kTokens - 1) / kTokens;
  mixer::parallel_tasks(first_task.back(), params_.num_threads, [&](int64_t task) {
    const int s = int(std::upper_bound(first_task.begin(), first_task.end(), task) - first_task.begin()) - 1;
    mixer::ConvRows r;
    r.x = x.ptr<const float>();
    r.y = out.ptr<float>();
    r.taps = conv_taps_.data();
    r.bias = params_.conv_bias.empty() ? nullptr : params_.conv_bias.data();
    r.state = state.conv_slot(md.state_slots[s]);
    r.scratch = mixer::thread_scratch(mixer::conv_scratch_floats(dim, K));
    r.dim = dim, r.K = K, r.t0 = md.query_start_loc[s];
    r.begin = (task - first_task[s]) * kTokens;
    r.end = std::min<int64_t>(md.query_len(s), r.begin + kTokens);
    r.has_initial_state = md.has_initial_state[s];
    r.silu = c.type != MambaType::short_conv;
    kernel(r);
  });
  // The new states, once every task has read the old ones: the last Hs inputs of each sequence,
  // the oldest of them still from the old state when it has fewer than Hs tokens (ascending i
  // reads old[i + len] before anything overwrites it).
  mixer::parallel_tasks(md.num_seqs, params_.num_threads, [&](int64_t s) {
    const int64_t len = md.query_len(int(s)), t0 = md.query_start_loc[s];
    if (len == 0) return;
    float* st = state.conv_slot(md.state_slots[s]);
    const bool init = md.has_initial_state[s];
    const float* xin = x.ptr<const float>();
    for (int64_t ch = 0; ch < dim; ++ch) {
      for (int64_t i = 0; i < Hs; ++i) {
        const int64_t u = len - Hs + i;
        st[ch * Hs + i] = u >= 0 ? xin[(t0 + u) * dim + ch] : (init ? st[ch * Hs + u + Hs] : 0.0f);
      }
    }
  });
}

}  // namespace attn
