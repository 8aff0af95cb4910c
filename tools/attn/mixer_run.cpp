// Mixer layers for `attn run`: random weights / activations, a runner per layer, the spot check.
#include "mixer_run.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "attn/error.hpp"

namespace attn_cli {
namespace {

using nlohmann::json;

std::vector<float> uniform(std::size_t n, Rng& rng, float lo, float hi) {
  std::vector<float> v(n);
  for (float& x : v) x = rng.uniform(lo, hi);
  return v;
}

attn::Buffer random_f32(std::vector<int64_t> shape, Rng& rng, float lo, float hi) {
  attn::Buffer b(attn::DType::float32, std::move(shape));
  auto* p = static_cast<float*>(b.data());
  const int64_t n = b.view().numel();
  for (int64_t i = 0; i < n; ++i) p[i] = rng.uniform(lo, hi);
  return b;
}

/// Floats per token row of a [T, ...] buffer.
int64_t row_floats(const attn::Buffer& b) { return b.shape()[0] ? b.view().numel() / b.shape()[0] : 0; }

attn::TensorView view_or_empty(const attn::Buffer& b) { return b.bytes() ? b.view() : attn::TensorView{}; }

/// |a - b| <= atol + rtol·|b| over n floats; NaN fails. Returns {max |a - b|, index of the first failure or -1}.
std::pair<double, int64_t> compare_floats(const float* a, const float* b, int64_t n, double atol, double rtol) {
  double max_err = 0;
  int64_t first_bad = -1;
  for (int64_t i = 0; i < n; ++i) {
    const double err = std::fabs(double(a[i]) - double(b[i]));
    if (std::isfinite(err)) max_err = std::max(max_err, err);
    if (first_bad < 0 && !(err <= atol + rtol * std::fabs(double(b[i])))) first_bad = i;
  }
  return {max_err, first_bad};
}

// The MixerStepInputs buffer behind each MixerInputs view.
using ViewField = attn::TensorView attn::MixerInputs::*;
using BufferField = attn::Buffer MixerStepInputs::*;
constexpr std::pair<ViewField, BufferField> kFields[] = {
    {&attn::MixerInputs::x, &MixerStepInputs::x},   {&attn::MixerInputs::k, &MixerStepInputs::k},
    {&attn::MixerInputs::v, &MixerStepInputs::v},   {&attn::MixerInputs::dt, &MixerStepInputs::dt},
    {&attn::MixerInputs::B, &MixerStepInputs::B},   {&attn::MixerInputs::C, &MixerStepInputs::C},
    {&attn::MixerInputs::b, &MixerStepInputs::b},   {&attn::MixerInputs::z, &MixerStepInputs::z}};

BufferField buffer_of(ViewField f) {
  for (const auto& [view, buffer] : kFields)
    if (view == f) return buffer;
  throw attn::Error("mixer input field invalid: expected one of MixerInputs' tensor views");
}

}  // namespace

attn::MixerParams random_mixer_params(const attn::MixerConfig& c, int threads, Rng& rng) {
  attn::MixerParams p;
  p.config = c;
  p.num_threads = threads;
  if (c.conv_dim() > 0) {
    p.conv_weight = uniform(std::size_t(c.conv_dim()) * c.d_conv, rng, -0.6f, 0.6f);
    p.conv_bias = uniform(std::size_t(c.conv_dim()), rng, -0.2f, 0.2f);
  }
  for (const attn::MixerTypeInfo::Weight& w : attn::mixer_type_info(c.type).weights)
    p.*w.field = uniform(std::size_t(w.size(c)), rng, w.lo, w.hi);
  p.validate();
  return p;
}

attn::MixerInputs MixerStepInputs::inputs() const {
  attn::MixerInputs in;
  for (const auto& [view, buffer] : kFields) in.*view = view_or_empty(this->*buffer);
  return in;
}

MixerStepInputs MixerStepInputs::gather(const std::vector<int32_t>& rows) const {
  auto pick = [&](const attn::Buffer& src) {
    if (!src.bytes()) return attn::Buffer();
    std::vector<int64_t> shape = src.shape();
    shape[0] = int64_t(rows.size());
    attn::Buffer out(attn::DType::float32, shape);
    const int64_t row = row_floats(src);
    const auto* s = static_cast<const float*>(src.data());
    auto* d = static_cast<float*>(out.data());
    for (std::size_t i = 0; i < rows.size(); ++i) std::memcpy(d + int64_t(i) * row, s + rows[i] * row, std::size_t(row) * 4);
    return out;
  };
  MixerStepInputs g;
  for (const auto& [view, buffer] : kFields) g.*buffer = pick(this->*buffer);
  return g;
}

MixerStepInputs random_mixer_inputs(const attn::MixerConfig& c, int32_t T, Rng& rng) {
  const attn::MixerTypeInfo& row = attn::mixer_type_info(c.type);
  if (row.inputs.empty())
    throw attn::Error("mixer=" + std::string(attn::to_string(c.type)) +
                      " invalid: expected a built-in mixer type (attn run does not know a custom mixer's inputs)");
  MixerStepInputs in;
  for (const attn::MixerTypeInfo::Input& spec : row.inputs)
    if (spec.when != attn::MixerTypeInfo::Input::When::convolved)
      in.*buffer_of(spec.field) = random_f32(spec.shape(c).after(T), rng, spec.lo, spec.hi);
  return in;
}

attn::Buffer make_mixer_output(const attn::MixerConfig& c, int32_t T) { return attn::Buffer(attn::DType::float32, c.out_shape(T)); }

void MixerSequences::advance(int32_t n) {
  std::vector<int32_t> slots(static_cast<std::size_t>(num_seqs));
  for (int32_t s = 0; s < num_seqs; ++s) slots[std::size_t(s)] = s;
  md = attn::MixerBatch::build(std::vector<int32_t>(std::size_t(num_seqs), n), slots,
                               std::vector<uint8_t>(std::size_t(num_seqs), started ? 1 : 0), num_seqs);
  started = true;
}

MixerRunner::MixerRunner(const std::string& backend, const attn::MixerParams& params, int32_t num_slots)
    : backend_(backend), params_(params) {
  impl_ = attn::create_mixer(backend, params);
  state_ = std::make_unique<attn::MambaStateCache>(params.config, num_slots);
}

std::shared_ptr<const attn::MixerPlan> MixerRunner::plan(const attn::MixerBatch& md) const {
  return impl_->plan(md, state_->num_slots());
}

bool MixerRunner::shares_plan(const attn::MixerPlan& plan) const {
  const int chunk = params_.config.has_chunked_form() ? params_.chunk_size : 0;
  return plan.backend == backend_ && plan.config == params_.config && plan.chunk_size == chunk &&
         plan.num_slots == state_->num_slots() && (params_.num_threads <= 0 || plan.threads == params_.num_threads);
}

void MixerRunner::run(const attn::MixerPlan& plan, const MixerStepInputs& in, const attn::TensorView& out,
                      attn::Workspace* workspace) {
  impl_->run(plan, attn::MixerArgs{in.inputs(), state_.get(), out, workspace});
}

void MixerRunner::forward(const attn::MixerBatch& md, const MixerStepInputs& in, const attn::TensorView& out) {
  impl_->forward(in.inputs(), *state_, md, out);
}

json mixer_spot_check(const MixerRecording& rec, const MixerRunner& layer) {
  attn::MixerParams p = layer.params();
  p.chunk_size = 0;
  MixerRunner oracle(layer.backend(), p, layer.state().num_slots());
  // Two fp32 evaluation orders of the same recurrence (each within ~2e-5 of fp64 in the mixer
  // tests on small shapes); real layer widths and a few hundred tokens add rounding, hence 1e-4.
  const double atol = 1e-4, rtol = 1e-4;
  double max_err = 0;
  std::string failure;
  int64_t compared = 0;
  for (std::size_t step = 0; step < rec.mds.size(); ++step) {
    const attn::MixerBatch& md = rec.mds[step];
    const attn::Buffer& got = rec.outputs[step];
    const int64_t row = row_floats(got);
    int32_t longest = 0;
    for (int s = 0; s < md.num_seqs; ++s) longest = std::max(longest, md.query_len(s));
    for (int32_t i = 0; i < longest; ++i) {
      // Token i of every sequence that has one, continuing its slot (or starting it at i = 0).
      std::vector<int32_t> rows, slots;
      std::vector<uint8_t> has_state;
      for (int s = 0; s < md.num_seqs; ++s) {
        if (i >= md.query_len(s)) continue;
        rows.push_back(md.query_start_loc[s] + i);
        slots.push_back(md.state_slots[s]);
        has_state.push_back(i > 0 || md.has_initial_state[s] ? 1 : 0);
      }
      const attn::MixerBatch one = attn::MixerBatch::build(std::vector<int32_t>(rows.size(), 1), slots, has_state,
                                                           oracle.state().num_slots());
      attn::Buffer want = make_mixer_output(p.config, int32_t(rows.size()));
      oracle.forward(one, rec.inputs[step].gather(rows), want.view());
      for (std::size_t r = 0; r < rows.size(); ++r) {
        const float* a = static_cast<const float*>(got.data()) + rows[r] * row;
        const float* b = static_cast<const float*>(want.data()) + int64_t(r) * row;
        const auto [err, bad] = compare_floats(a, b, row, atol, rtol);
        max_err = std::max(max_err, err);
        compared += row;
        if (bad >= 0 && failure.empty()) {
          failure = "step " + std::to_string(step) + ", token " + std::to_string(rows[r]) + ", feature " +
                    std::to_string(bad) + ": " + std::to_string(a[bad]) + " vs sequential " + std::to_string(b[bad]);
        }
      }
    }
  }
  // The states both leave behind: decode steps must have updated the slots in place.
  double state_err = 0;
  const attn::MambaStateCache& s1 = layer.state();
  const attn::MambaStateCache& s2 = oracle.state();
  for (int which = 0; which < 2; ++which) {
    const attn::TensorView a = which ? s1.ssm_state() : s1.conv_state();
    const attn::TensorView b = which ? s2.ssm_state() : s2.conv_state();
    const auto [err, bad] = compare_floats(a.ptr<const float>(), b.ptr<const float>(), a.numel(), atol, rtol);
    state_err = std::max(state_err, err);
    if (bad >= 0 && failure.empty()) failure = std::string(which ? "ssm" : "conv") + " state element " + std::to_string(bad);
  }
  const std::string reference =
      layer.backend() + (p.config.has_chunked_form() ? " with chunk_size 0 (sequential recurrence), one token per call"
                                                        : ", one token per call (prefill state carried token by token)");
  json j{{"layer", rec.layer},
         {"backend", layer.backend()},
         {"mixer", std::string(attn::to_string(p.config.type))},
         {"reference", reference},
         {"steps", rec.mds.size()},
         {"values_compared", compared},
         {"max_abs_err", max_err},
         {"state_max_abs_err", state_err},
         {"atol", atol},
         {"rtol", rtol},
         {"passed", failure.empty()}};
  if (!failure.empty()) j["first_failure"] = failure;
  return j;
}

}  // namespace attn_cli
