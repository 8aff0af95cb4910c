// Random activations, per-layer runners and comparison for `attn run` / `attn check`.
#include "workload.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "attn/error.hpp"
#include "attn/registry.hpp"

namespace attn_cli {
namespace {

attn::Buffer random_buffer(attn::DType dtype, std::vector<int64_t> shape, Rng& rng) {
  attn::Buffer b(dtype, std::move(shape));
  const int64_t n = b.view().numel();
  for (int64_t i = 0; i < n; ++i) attn::store_from_float(b.data(), dtype, i, rng.uniform(-1.0f, 1.0f));
  return b;
}

}  // namespace

void set_fp8_scales(attn::KVCache& cache, const attn::LayerConfig& cfg) {
  using K = attn::KVCacheDType;
  const K k = cfg.kv_cache_dtype;
  if (k != K::fp8 && k != K::fp8_e4m3 && k != K::fp8_e5m2 && k != K::fp8_inc) return;
  // Activations are U(-1, 1): stored values up to ~1/0.012 = 83, inside e4m3's 448, and the
  // per-head spread makes a kernel that applies head 0's scale to every head fail.
  const int heads = cfg.use_per_head_quant_scales ? cfg.num_kv_heads : 1;
  std::vector<float> ks, vs;
  for (int h = 0; h < heads; ++h) {
    ks.push_back(0.0123f * (1.0f + 0.37f * float(h)));
    // MLA's value is the first head_size_v values of the one latent entry: one scale for both.
    vs.push_back(cfg.use_mla ? ks.back() : 0.0157f * (1.0f + 0.21f * float(h)));
  }
  cache.set_scales(ks, vs);
}

attn::TensorView StepInputs::value() const {
  if (v_width_in_k == 0) return v.view();
  // The first head_size_v values of each latent entry: same rows (strides) as k, narrower.
  attn::TensorView t = k.view();
  t.shape[2] = v_width_in_k;
  return t;
}

StepInputs random_inputs(const attn::LayerConfig& cfg, int32_t num_tokens, Rng& rng, bool mla_expanded) {
  StepInputs in;
  const int q_width = mla_expanded ? cfg.qk_nope_head_dim + cfg.qk_rope_head_dim : cfg.head_size;
  in.q = random_buffer(cfg.dtype, {num_tokens, cfg.num_heads, q_width}, rng);
  in.k = random_buffer(cfg.dtype, {num_tokens, cfg.num_kv_heads, cfg.head_size}, rng);
  if (cfg.use_mla) {
    in.v_width_in_k = cfg.effective_head_size_v();
  } else {
    in.v = random_buffer(cfg.dtype, {num_tokens, cfg.num_kv_heads, cfg.effective_head_size_v()}, rng);
  }
  return in;
}

attn::Buffer make_output(const attn::LayerConfig& cfg, int32_t num_tokens, bool mla_expanded) {
  const int width = mla_expanded ? cfg.v_head_dim : cfg.effective_head_size_v();
  return attn::Buffer(cfg.dtype, {num_tokens, cfg.num_heads, width});
}

attn::LayerConfig oracle_config(const attn::LayerConfig& cfg) {
  attn::LayerConfig o = cfg;
  if (o.use_mla) {
    o.use_mla = false;
    o.kv_lora_rank = o.qk_rope_head_dim = o.qk_nope_head_dim = o.v_head_dim = 0;
  }
  if (o.use_sparse) {
    attn::require(o.sliding_window == 0, "sliding_window", o.sliding_window, "0 on a top-k sparse layer");
    o.use_sparse = false;
    o.sliding_window = o.index_topk;
    o.index_topk = 0;
  }
  // The reference has no MLA entry formats: its cache holds the layer dtype, and LayerRunner
  // writes it the values an fp8_ds_mla entry dequantizes to.
  if (o.kv_cache_dtype == attn::KVCacheDType::fp8_ds_mla) o.kv_cache_dtype = attn::KVCacheDType::auto_;
  return o;
}

attn::LayerParams oracle_params(const attn::LayerParams& p) {
  attn::LayerParams o = p;
  o.scale = p.effective_scale();
  o.config = oracle_config(p.config);
  o.variant.clear();
  return o;
}

attn::Buffer sparse_indices(const attn::BatchMetadata& md, int topk, Rng& rng) {
  attn::require(topk > 0, "index_topk", topk, "> 0");
  attn::Buffer idx(attn::DType::int32, {md.num_tokens, topk});
  auto* p = static_cast<int32_t*>(idx.data());
  std::fill(p, p + int64_t(md.num_tokens) * topk, -1);
  for (int s = 0; s < md.num_seqs; ++s) {
    for (int i = 0; i < md.query_len(s); ++i) {
      const int t = md.query_start_loc[s] + i;
      const int pos = md.context_len(s) + i;
      const int first = std::max(0, pos - topk + 1);
      int32_t* row = p + int64_t(t) * topk;
      for (int k = first; k <= pos; ++k) row[k - first] = k;
      // Shuffle so kernels cannot rely on sorted indices.
      for (int k = pos - first; k > 0; --k) std::swap(row[k], row[rng.next() % uint64_t(k + 1)]);
    }
  }
  return idx;
}

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

namespace {

Tolerance scaled(attn::test::ToleranceRule rule, const attn::Buffer& ref) {
  double ref_max = 0;
  for (int64_t i = 0; i < ref.view().numel(); ++i)
    ref_max = std::max(ref_max, std::fabs(double(attn::load_as_float(ref.data(), ref.dtype(), i))));
  return rule.scaled(ref_max);
}

}  // namespace

Tolerance tolerance_for(const attn::LayerConfig& cfg, const attn::Buffer& ref) {
  // fp8_ds_mla: the oracle's cache holds the dequantized entries rounded to a 16-bit layer dtype
  // (the reference has no entry format), a rounding the checked kernel never does.
  if (cfg.kv_cache_dtype == attn::KVCacheDType::fp8_ds_mla && cfg.dtype != attn::DType::float32)
    return reordered_tolerance_for(cfg, ref);
  return scaled(attn::test::tolerance_rule(cfg.dtype, attn::kv_storage_dtype(cfg.kv_cache_dtype, cfg.dtype)), ref);
}

Tolerance reordered_tolerance_for(const attn::LayerConfig& cfg, const attn::Buffer& ref) {
  return scaled(attn::test::reordered_rounding_rule(cfg.dtype), ref);
}

Comparison compare(const attn::Buffer& out, const attn::Buffer& ref, Tolerance tol) {
  Comparison c;
  attn::require(out.shape() == ref.shape(), "out.shape", out.view().shape_string(), "the reference's " + ref.view().shape_string());
  const auto& shape = out.shape();
  const int64_t n = out.view().numel();
  for (int64_t i = 0; i < n; ++i) {
    const double a = attn::load_as_float(out.data(), out.dtype(), i);
    const double b = attn::load_as_float(ref.data(), ref.dtype(), i);
    const double err = std::fabs(a - b);
    const bool bad = !(err <= tol.atol + tol.rtol * std::fabs(b));  // NaN fails too
    if (std::isfinite(err)) c.max_abs_err = std::max(c.max_abs_err, err);
    if (bad && c.ok) {
      c.ok = false;
      const int64_t d = shape[2], h = shape[1];
      char buf[160];
      std::snprintf(buf, sizeof buf, "[token %lld, head %lld, dim %lld]: %g vs reference %g", (long long)(i / (h * d)),
                    (long long)(i / d % h), (long long)(i % d), a, b);
      c.first_failure = buf;
    }
  }
  return c;
}

}  // namespace attn_cli
