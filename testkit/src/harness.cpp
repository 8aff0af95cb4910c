// Random activations, the oracle's form of a layer, tolerances and output comparison
// (testkit/harness.hpp).
#include "testkit/harness.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "attn/error.hpp"

namespace attn::testkit {
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
  attn::require(out.shape() == ref.shape(), "out.shape", out.view().shape_string(), "the reference's " + ref.view().shape_string());
  auto value = [](const attn::Buffer& b) { return [&b](int64_t i) { return double(attn::load_as_float(b.data(), b.dtype(), i)); }; };
  const ElementCheck e = check_elements(out.view().numel(), value(out), value(ref), tol);
  Comparison c;
  c.ok = e.ok, c.max_abs_err = e.max_abs_err;
  if (!e.ok) {
    const int64_t i = e.first_failure, d = out.shape()[2], h = out.shape()[1];
    char buf[160];
    std::snprintf(buf, sizeof buf, "[token %lld, head %lld, dim %lld]: %g vs reference %g", (long long)(i / (h * d)),
                  (long long)(i / d % h), (long long)(i % d), value(out)(i), value(ref)(i));
    c.first_failure = buf;
  }
  return c;
}

}  // namespace attn::testkit
