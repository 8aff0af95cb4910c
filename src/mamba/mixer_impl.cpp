// MixerImpl base: shared checks and the causal depthwise conv1d every conv mixer starts with.
#include <omp.h>

#include <vector>

#include "attn/error.hpp"
#include "attn/platform.hpp"
#include "mamba/mixer_support.hpp"

namespace attn {

namespace mixer {

bool use_avx512() {
  static const bool ok = [] {
    const Platform& p = detect_cpu();
    return p.has(CpuFeature::avx512f) && p.has(CpuFeature::avx512bw) && p.has(CpuFeature::avx512vl);
  }();
  return ok;
}

std::string isa_for(const Platform& p) {
  if (p.kind != PlatformKind::cpu) return "generic";
  const bool avx512 = p.has(CpuFeature::avx512f) && p.has(CpuFeature::avx512bw) && p.has(CpuFeature::avx512vl);
  return avx512 ? "avx512" : "generic";
}

std::string descriptor_variant(const Platform& p) { return isa_for(p); }

int omp_threads() { return omp_get_max_threads(); }

void check_input(const TensorView& t, const char* name, std::initializer_list<int64_t> extents) {
  require(t.data != nullptr, name, "null", "a tensor of shape with extents given by the mixer config");
  check_tensor(t, name, int(extents.size()), {DType::float32}, extents);
  require(t.is_contiguous(), std::string(name) + ".strides", t.shape_string(), "a contiguous tensor");
}

}  // namespace mixer

MixerImpl::MixerImpl(MixerParams params) : params_(std::move(params)) { params_.validate(); }

std::string MixerImpl::variant() const { return mixer::use_avx512() ? "avx512" : "generic"; }

void MixerImpl::check_common(const MambaStateCache& state, const MixerBatch& md, const TensorView& out) const {
  require(state.config() == params_.config, "state.config", state.config().to_string(),
          "the layer's " + params_.config.to_string());
  md.validate(state.num_slots());
  const MixerConfig& c = params_.config;
  if (c.type == MambaType::linear_attention || c.type == MambaType::gdn_attention) {
    mixer::check_input(out, "out", {md.num_tokens, c.num_heads, c.head_v_dim});
  } else {
    mixer::check_input(out, "out", {md.num_tokens, c.out_dim()});
  }
}

void MixerImpl::conv(const TensorView& x, MambaStateCache& state, const MixerBatch& md, const TensorView& out) const {
  const MixerConfig& c = params_.config;
  const int64_t dim = c.conv_dim();
  require(dim > 0, "mixer type", to_string(c.type), "a mixer with a convolution (not linear_attention)");
  require(state.config() == c, "state.config", state.config().to_string(), "the layer's " + c.to_string());
  md.validate(state.num_slots());
  mixer::check_input(x, "x", {md.num_tokens, dim});
  mixer::check_input(out, "conv out", {md.num_tokens, dim});
  require(out.data != x.data, "conv out", "aliases x", "a buffer distinct from x");
  const int K = c.d_conv, H = K - 1;  // H: inputs of history the state keeps
  const bool act = c.type != MambaType::short_conv;
  const float* w = params_.conv_weight.data();
  const float* bias = params_.conv_bias.empty() ? nullptr : params_.conv_bias.data();
  const float* xin = x.ptr<const float>();
  float* y = out.ptr<float>();
  // Task = (sequence, block of 64 channels): channels are independent, and a block keeps the
  // per-token rows it touches contiguous.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (dim + kBlock - 1) / kBlock;
  mixer::parallel_tasks(int64_t(md.num_seqs) * blocks, params_.num_threads, [&](int64_t task) {
    const int s = int(task / blocks);
    const int64_t c0 = (task % blocks) * kBlock, c1 = std::min(dim, c0 + kBlock);
    const int64_t t0 = md.query_start_loc[s], len = md.query_len(s);
    if (len == 0) return;
    float* st = state.conv_slot(md.state_slots[s]);
    const bool init = md.has_initial_state[s];
    float window[64];  // K - 1 history + current; d_conv is small (2..8)
    for (int64_t ch = c0; ch < c1; ++ch) {
      float* hist = st + ch * H;
      for (int i = 0; i < H; ++i) window[i] = init ? hist[i] : 0.0f;
      const float* wc = w + ch * K;
      const float b0 = bias ? bias[ch] : 0.0f;
      for (int64_t t = 0; t < len; ++t) {
        const float xv = xin[(t0 + t) * dim + ch];
        float acc = b0 + wc[K - 1] * xv;
        for (int i = 0; i < H; ++i) acc += wc[i] * window[i];
        for (int i = 0; i + 1 < H; ++i) window[i] = window[i + 1];
        if (H > 0) window[H - 1] = xv;
        y[(t0 + t) * dim + ch] = act ? mixer::silu(acc) : acc;
      }
      for (int i = 0; i < H; ++i) hist[i] = window[i];
    }
  });
}

}  // namespace attn
