// MixerImpl (params, forward, the one-call conv) and MixerBase: ISA choice and conv taps (its plan
// and checks are in mixer_plan.cpp, the conv in mixer_conv.cpp).

#include <vector>

#include "attn/error.hpp"
#include "attn/platform.hpp"
#include "cpu/isa.hpp"
#include "mamba/mixer_base.hpp"
#include "mamba/mixer_support.hpp"

namespace attn {

namespace mixer {

std::string chosen_isa(const Platform& p) {
  return std::string(cpu::to_string(cpu::choose(p, {cpu::Isa::avx512, cpu::Isa::generic})));
}

std::string descriptor_variant(const Platform& p) { return chosen_isa(p); }

void check_input(const TensorView& t, const char* name, std::initializer_list<int64_t> extents) {
  // Runs per layer per step: no string is built unless a check fails.
  ATTN_REQUIRE(t.data != nullptr, name, "null", "a tensor of shape with extents given by the mixer config");
  check_tensor(t, name, int(extents.size()), {DType::float32}, extents);
  ATTN_REQUIRE(t.is_contiguous(), std::string(name) + ".strides", t.shape_string(), "a contiguous tensor");
}

void check_input(const TensorView& t, const char* name, int64_t tokens, const MixerShape& shape) {
  const int64_t* d = shape.dims;
  switch (shape.rank) {
    case 0: check_input(t, name, {tokens}); break;
    case 1: check_input(t, name, {tokens, d[0]}); break;
    case 2: check_input(t, name, {tokens, d[0], d[1]}); break;
    default: check_input(t, name, {tokens, d[0], d[1], d[2]}); break;
  }
}

}  // namespace mixer

MixerImpl::MixerImpl(MixerParams params) : params_(std::move(params)), backend_(to_string(params_.config.type)) {
  params_.validate();
}

void MixerImpl::forward(const MixerInputs& in, MambaStateCache& state, const MixerBatch& md, const TensorView& out) const {
  MixerArgs args;
  args.in = in, args.state = &state, args.out = out;
  run(*plan(md, state.num_slots()), args);
}

void MixerImpl::conv(const TensorView& x, MambaStateCache& state, const MixerBatch& md, const TensorView& out) const {
  conv(*plan(md, state.num_slots()), x, state, out);
}

namespace mixer {

MixerBase::MixerBase(MixerParams params) : MixerImpl(std::move(params)) {
  avx512_ = chosen_isa(detect_cpu()) == "avx512";
  const int64_t dim = params_.config.conv_dim(), K = params_.config.d_conv;
  if (dim > 0 && !params_.conv_weight.empty()) {
    conv_taps_.resize(std::size_t(dim * K));
    for (int64_t ch = 0; ch < dim; ++ch)
      for (int64_t k = 0; k < K; ++k) conv_taps_[k * dim + ch] = params_.conv_weight[ch * K + k];
  }
}

std::string MixerBase::variant() const { return avx512_ ? "avx512" : "generic"; }

}  // namespace mixer

}  // namespace attn
