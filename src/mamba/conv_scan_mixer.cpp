// The convolve-then-scan skeleton (conv_scan_mixer.hpp): input checks from the per-type table,
// the conv, the scan.
#include "mamba/conv_scan_mixer.hpp"

#include <algorithm>

namespace attn::mixer {

void ConvScanMixer::check_inputs(int64_t tokens, const MixerInputs& in) const {
  using When = MixerTypeInfo::Input::When;
  const MixerConfig& c = params_.config;
  for (const MixerTypeInfo::Input& spec : mixer_type_info(c.type).inputs) {
    if (spec.when == (in.x_is_convolved ? When::raw : When::convolved)) continue;
    const TensorView& t = in.*spec.field;
    if (spec.optional && !t.data) continue;
    check_input(t, spec.name, tokens, spec.shape(c));
  }
}

void ConvScanMixer::run_checked(const MixerPlan& plan, const MixerInputs& in, MambaStateCache& state, const TensorView& out,
                                const Scratch& scratch) const {
  check_inputs(plan.batch.num_tokens, in);
  const float* x = in.x.ptr<const float>();
  if (params_.config.conv_dim() > 0 && !in.x_is_convolved) {
    const float* conv_in = conv_input(plan, in, scratch);
    float* y = conv_output(out, scratch);
    run_conv(plan, conv_in, state, y, scratch);
    x = y;
  }
  scan(plan, in, x, state, out, scratch);
}

const float* ConvScanMixer::conv_input(const MixerPlan&, const MixerInputs& in, const Scratch&) const {
  return in.x.ptr<const float>();
}

float* ConvScanMixer::conv_output(const TensorView&, const Scratch& scratch) const { return scratch.buffer; }

int64_t ConvScanMixer::scan_scratch_floats(int64_t len, int64_t head_block) const {
  // The plan's chunk_size: 0 for a type without a chunked form, or when the recurrence is asked for.
  const int64_t L = params_.config.has_chunked_form() ? params_.chunk_size : 0;
  return chunk_scratch_floats(len > 1 && L > 0 ? std::min<int64_t>(L, len) : 0, head_block);
}

}  // namespace attn::mixer
