// Spot checks of one attention layer of `attn run` against the reference backend.
#include "attention_check.hpp"

#include <cstring>

#include "attn/capabilities.hpp"
#include "attn/registry.hpp"

namespace attn_cli {
namespace {

using nlohmann::json;

std::vector<float> to_floats(const attn::Buffer& b) {
  std::vector<float> v(std::size_t(b.view().numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = attn::load_as_float(b.data(), b.dtype(), int64_t(i));
  return v;
}

/// The reference's output for step `step` of the recording: it replays the layer's writes up to
/// that step into its own cache, then runs `q` (default: the step's recorded queries).
attn::Buffer oracle_output(const AttentionRecording& rec, int step, const LayerRunner& layer, const attn::Buffer* q, Rng& rng) {
  auto ref = attn::Registry::instance().find("reference");
  const attn::LayerParams p = oracle_params(layer.params());
  LayerRunner oracle(*ref, p, layer.num_blocks(), layer.block_size(), &layer.params().config);
  for (int i = 0; i <= step; ++i) oracle.write(rec.mds[std::size_t(i)], rec.inputs[std::size_t(i)]);
  const attn::BatchMetadata& md = rec.mds[std::size_t(step)];
  attn::Buffer out = make_output(p.config, md.num_tokens);
  if (q) {
    StepInputs in;  // forward reads only q
    in.q = attn::Buffer(q->dtype(), q->shape());
    std::memcpy(in.q.data(), q->data(), q->bytes());
    oracle.forward(md, in, out.view(), rng);
  } else {
    oracle.forward(md, rec.inputs[std::size_t(step)], out.view(), rng);
  }
  return out;
}

json result_json(const AttentionRecording& rec, const std::string& backend, const std::string& reference,
                 const Comparison& c, Tolerance tol) {
  json j{{"layer", rec.layer},       {"backend", backend}, {"reference", reference}, {"max_abs_err", c.max_abs_err},
         {"atol", tol.atol},         {"rtol", tol.rtol},   {"passed", c.ok}};
  if (!c.ok) j["first_failure"] = c.first_failure;
  return j;
}

}  // namespace

void AttentionRecording::record(const attn::BatchMetadata& md, StepInputs in, attn::Buffer out, bool expanded) {
  mds.push_back(md);
  inputs.push_back(std::move(in));
  const int step = int(mds.size()) - 1;
  if (expanded) {
    expanded_step = step;
    expanded_out = std::move(out);
  } else {
    last_step = step;
    last_out = std::move(out);
  }
}

int pick_sample_layer(const Plan& plan, const attn::Platform& platform, std::string& why_none) {
  auto ref = attn::Registry::instance().find("reference");
  if (!ref) {
    why_none = "no 'reference' backend registered";
    return -1;
  }
  for (const auto& l : plan.rank_model.layers) {  // the shapes that run
    if (l.kind != attn::LayerKind::attention) continue;
    auto reasons = attn::check_capabilities(ref->caps, oracle_config(l.attention), platform);
    if (reasons.empty()) return l.index;
    if (why_none.empty()) why_none = "reference cannot serve layer " + std::to_string(l.index) + ": " + reasons[0].to_string();
  }
  if (why_none.empty()) why_none = "the model has no attention layers";
  return -1;
}

json spot_check(const AttentionRecording& rec, const LayerRunner& layer, const std::string& backend, Rng& rng) {
  if (rec.last_step < 0) return nullptr;
  const attn::Buffer want = oracle_output(rec, rec.last_step, layer, nullptr, rng);
  const Tolerance tol = tolerance_for(layer.params().config, want);
  return result_json(rec, backend, "reference", compare(rec.last_out, want, tol), tol);
}

json expanded_check(const AttentionRecording& rec, const LayerRunner& layer, const std::string& backend, Rng& rng) {
  if (rec.expanded_step < 0) return nullptr;
  const attn::LayerConfig& c = layer.params().config;
  const attn::Buffer& q = rec.inputs[std::size_t(rec.expanded_step)].q;
  const int64_t T = q.shape()[0], H = c.num_heads, R = c.kv_lora_rank, N = c.qk_nope_head_dim;
  const int64_t P = c.qk_rope_head_dim, V = c.v_head_dim;
  const std::vector<float> qf = to_floats(q), wk = to_floats(layer.w_uk()), wv = to_floats(layer.w_uv());

  // q_latent[t, h] = [W_UK[h] · q_nope[t, h] | q_rope[t, h]], in the layer's dtype like a real q.
  attn::Buffer q_abs(c.dtype, {T, H, R + P});
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const float* qn = qf.data() + (t * H + h) * (N + P);
      const int64_t row = (t * H + h) * (R + P);
      for (int64_t r = 0; r < R; ++r) {
        const float* w = wk.data() + (h * R + r) * N;
        float acc = 0;
        for (int64_t n = 0; n < N; ++n) acc += w[n] * qn[n];
        attn::store_from_float(q_abs.data(), c.dtype, row + r, acc);
      }
      for (int64_t i = 0; i < P; ++i) attn::store_from_float(q_abs.data(), c.dtype, row + R + i, qn[N + i]);
    }
  }
  const std::vector<float> latent = to_floats(oracle_output(rec, rec.expanded_step, layer, &q_abs, rng));
  // out[t, h] = latent[t, h] · W_UV[h]
  attn::Buffer want(attn::DType::float32, {T, H, V});
  auto* o = static_cast<float*>(want.data());
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      float* out = o + (t * H + h) * V;
      for (int64_t v = 0; v < V; ++v) out[v] = 0;
      for (int64_t r = 0; r < R; ++r) {
        const float l = latent[std::size_t((t * H + h) * R + r)];
        const float* w = wv.data() + (h * R + r) * V;
        for (int64_t v = 0; v < V; ++v) out[v] += l * w[v];
      }
    }
  }
  const Tolerance tol = reordered_tolerance_for(c, want);
  return result_json(rec, backend, "reference (absorbed form, q and output projected with the same W_UK, W_UV)",
                     compare(rec.expanded_out, want, tol), tol);
}

}  // namespace attn_cli
