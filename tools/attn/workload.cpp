// The per-layer runner of `attn run` / `attn check`.
#include "workload.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "attn/error.hpp"
#include "attn/registry.hpp"

namespace attn_cli {

LayerRunner::LayerRunner(const attn::BackendDescriptor& backend, const attn::LayerParams& params, int32_t num_blocks,
                         int32_t block_size, const attn::LayerConfig* scales_of)
    : layer_(attn::Layer::on_backend(backend.name, params)), num_blocks_(num_blocks), block_size_(block_size) {
  cache_ = std::make_unique<attn::KVCache>(layer_.cache_spec(num_blocks, block_size));
  set_fp8_scales(*cache_, scales_of ? *scales_of : params.config);
  round_as_ds_mla_ = scales_of && scales_of->kv_cache_dtype == attn::KVCacheDType::fp8_ds_mla &&
                     params.config.kv_cache_dtype != attn::KVCacheDType::fp8_ds_mla;
}

bool LayerRunner::use_random_up_projections(Rng& rng) {
  const attn::LayerConfig& c = layer_.config();
  // Top-k sparse layers stay absorbed: the expanded form would attend to every position.
  if (!c.use_mla || c.use_sparse || c.qk_nope_head_dim <= 0 || c.v_head_dim <= 0) return false;
  // fan_in: the width each projected value sums over (q·W_UK sums over nope, latent·W_UV over rank).
  auto projection = [&](int inner, int fan_in) {
    attn::Buffer w(c.dtype, {c.num_heads, c.kv_lora_rank, inner});
    const float a = std::sqrt(3.0f / float(fan_in));
    for (int64_t i = 0; i < w.view().numel(); ++i) attn::store_from_float(w.data(), c.dtype, i, rng.uniform(-a, a));
    return w;
  };
  w_uk_ = projection(c.qk_nope_head_dim, c.qk_nope_head_dim);
  w_uv_ = projection(c.v_head_dim, c.kv_lora_rank);
  attn::LayerParams p = layer_.params();
  auto floats = [](const attn::Buffer& w) {
    std::vector<float> f(std::size_t(w.view().numel()));
    for (std::size_t i = 0; i < f.size(); ++i) f[i] = attn::load_as_float(w.data(), w.dtype(), int64_t(i));
    return f;
  };
  p.mla_w_uk = floats(w_uk_), p.mla_w_uv = floats(w_uv_);
  layer_ = attn::Layer::on_backend(layer_.backend(), std::move(p));
  return true;
}

bool LayerRunner::expanded(const attn::StepPlan& plan) const {
  return w_uk_.bytes() && plan.preferred_mla_form() == attn::MlaForm::expanded;
}

std::shared_ptr<const attn::StepPlan> LayerRunner::plan(const attn::BatchMetadata& md) const {
  return layer_.plan(md, cache_->spec());
}

void LayerRunner::write(const attn::BatchMetadata& md, const StepInputs& in) {
  if (!round_as_ds_mla_) {
    layer_.write_kv(in.k.view(), in.value(), *cache_, md);
    return;
  }
  // Each latent entry as an fp8_ds_mla cache returns it, in fp32 (the cache rounds it to its dtype).
  const attn::TensorView k = in.k.view();
  constexpr int kWidth = attn::ds_mla::kRank + attn::ds_mla::kRope;
  attn::require(k.size(2) == kWidth, "k.shape[2]", k.size(2), std::to_string(kWidth) + " (an fp8_ds_mla latent entry)");
  StepInputs rounded;
  rounded.k = attn::Buffer(attn::DType::float32, in.k.shape());
  rounded.v_width_in_k = in.v_width_in_k;
  auto* dst = static_cast<float*>(rounded.k.data());
  uint8_t entry[attn::ds_mla::kEntryBytes];
  float row[kWidth];
  for (int64_t t = 0; t < k.size(0); ++t) {
    for (int d = 0; d < kWidth; ++d) row[d] = attn::load_as_float(k.data, k.dtype, t * k.strides[0] + d);
    attn::ds_mla::quantize_entry(row, entry);
    attn::ds_mla::dequantize_entry(entry, dst + t * kWidth);
  }
  layer_.write_kv(rounded.k.view(), rounded.value(), *cache_, md);
}

attn::RunResult LayerRunner::run(const attn::StepPlan& plan, const StepInputs& in, const attn::TensorView& out, Rng& rng,
                                 bool write_new_kv, attn::Workspace* workspace) {
  attn::ForwardArgs args;
  args.q = in.q.view(), args.out = out, args.cache = cache_.get(), args.workspace = workspace;
  if (write_new_kv) args.new_k = in.k.view(), args.new_v = in.value();
  attn::Buffer indices;
  if (layer_.config().use_sparse) {
    indices = sparse_indices(plan.metadata(), layer_.config().index_topk, rng);
    args.topk_indices = indices.view();
  }
  if (expanded(plan)) args.mla_form = attn::MlaForm::expanded;
  return layer_.run(plan, args);
}

void LayerRunner::forward(const attn::BatchMetadata& md, const StepInputs& in, const attn::TensorView& out, Rng& rng) {
  run(*plan(md), in, out, rng, /*write_new_kv=*/false);
}

}  // namespace attn_cli
