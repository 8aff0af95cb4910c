#include "backends/cpu_mla/mla_impl.hpp"

#include <cmath>

#include "attn/error.hpp"

namespace attn::mla {

float mla_scale(const LayerParams& p) {
  if (p.scale > 0.0f) return p.scale;
  const int qk = p.config.qk_nope_head_dim + p.config.qk_rope_head_dim;
  return qk > 0 && p.config.qk_nope_head_dim > 0 ? 1.0f / std::sqrt(float(qk)) : p.effective_scale();
}

std::string mla_variant_name(const LayerConfig& c) {
  std::string name;
  best_attend(&name);
  // The AMX and bf16-dot kernels serve bf16 / fp8 latent caches; they hand others to the avx512 one.
  const DType storage = kv_storage_dtype(c.kv_cache_dtype, c.dtype);
  if (name == "amx" && !(amx_handles_storage(storage) && c.kv_lora_rank % 32 == 0))
    name = "avx512";
  if (name == "avx512bf16" && !bf16_handles_storage(storage, c.kv_lora_rank)) name = "avx512";
  return name;
}

MlaImpl::MlaImpl(const LayerParams& params) : params_(params) {
  params_.validate();
  const LayerConfig& c = params.config;
  shape_.num_heads = c.num_heads;
  shape_.rank = c.kv_lora_rank;
  shape_.rope = c.head_size - c.kv_lora_rank;
  shape_.scale = mla_scale(params);
  shape_.num_threads = params.num_threads;
  variant_ = mla_variant_name(c);
}

void MlaImpl::forward(const TensorView& q, const KVCache& cache, const BatchMetadata& md, const TensorView& out) {
  check_forward_args(params_, q, cache, md, out);
  absorbed_forward(shape_, q, cache, md, out, nullptr);
  last_form_ = "absorbed";
}

void MlaImpl::set_up_projections(const TensorView& w_uk, const TensorView& w_uv) {
  const LayerConfig& c = params_.config;
  require(c.qk_nope_head_dim > 0 && c.v_head_dim > 0, "qk_nope_head_dim/v_head_dim",
          std::to_string(c.qk_nope_head_dim) + "/" + std::to_string(c.v_head_dim), "both > 0 in the layer config");
  check_tensor(w_uk, "w_uk", 3, {DType::float32, DType::float16, DType::bfloat16}, {c.num_heads, c.kv_lora_rank, c.qk_nope_head_dim});
  check_tensor(w_uv, "w_uv", 3, {DType::float32, DType::float16, DType::bfloat16}, {c.num_heads, c.kv_lora_rank, c.v_head_dim});
  require(w_uk.is_contiguous(), "w_uk", w_uk.shape_string(), "a contiguous tensor");
  require(w_uv.is_contiguous(), "w_uv", w_uv.shape_string(), "a contiguous tensor");
  up_.nope = c.qk_nope_head_dim;
  up_.v_dim = c.v_head_dim;
  up_.w_uk.resize(size_t(w_uk.numel()));
  up_.w_uv.resize(size_t(w_uv.numel()));
  for (int64_t i = 0; i < w_uk.numel(); ++i) up_.w_uk[size_t(i)] = load_as_float(w_uk.data, w_uk.dtype, i);
  for (int64_t i = 0; i < w_uv.numel(); ++i) up_.w_uv[size_t(i)] = load_as_float(w_uv.data, w_uv.dtype, i);
}

void MlaImpl::forward_expanded(const TensorView& q, const KVCache& cache, const BatchMetadata& md, const TensorView& out) {
  require(q.dtype == params_.config.dtype, "q.dtype", to_string(q.dtype), "the layer dtype");
  require(out.dtype == params_.config.dtype, "out.dtype", to_string(out.dtype), "the layer dtype");
  expanded_forward(shape_, up_, q, cache, md, out);
  last_form_ = "expanded";
}

bool MlaImpl::expanded_pays_off(const BatchMetadata& md) const {
  if (up_.empty()) return false;
  return expanded_flops(shape_, up_.nope, up_.v_dim, md) < absorbed_flops(shape_, md);
}

void SparseMlaImpl::set_topk_indices(const TensorView& indices) {
  check_tensor(indices, "topk_indices", 2, {DType::int32}, {-1, -1});
  require(indices.size(1) > 0, "topk_indices.shape[1]", indices.size(1), "at least 1 (topk)");
  topk_ = indices;
  has_topk_ = true;
}

void SparseMlaImpl::forward(const TensorView& q, const KVCache& cache, const BatchMetadata& md, const TensorView& out) {
  require(has_topk_, "topk_indices", "unset", "set_topk_indices([num_tokens, topk] int32) before forward on a use_sparse layer");
  check_forward_args(params_, q, cache, md, out);
  absorbed_forward(shape_, q, cache, md, out, &topk_);
  has_topk_ = false;  // per-call input: a stale list must never be reused for the next step
  last_form_ = "absorbed";
}

void SparseMlaImpl::forward_expanded(const TensorView&, const KVCache&, const BatchMetadata&, const TensorView&) {
  throw Error("forward_expanded=top-k sparse layer invalid: expected forward() (the absorbed form, which reads only the listed positions)");
}

BackendDescriptor mla_descriptor_base() {
  BackendDescriptor d;
  Capabilities& caps = d.caps;
  caps.dtypes = {DType::float32, DType::float16, DType::bfloat16};
  caps.kv_cache_dtypes = {KVCacheDType::auto_, KVCacheDType::float16, KVCacheDType::bfloat16,
                          KVCacheDType::fp8, KVCacheDType::fp8_e4m3, KVCacheDType::fp8_e5m2};
  caps.head_sizes = SizeRule::any();
  caps.block_sizes = SizeRule::any();
  caps.distinct_head_size_v = true;
  caps.mla = true;
  d.priority = 10;
  // 64 entries × 1152 bytes (bf16, 576 wide) = 72 KiB contiguous per block: long sequential reads.
  d.preferred_block_size = 64;
  d.kv_layout = KVLayout::MLA;
  return d;
}

std::vector<Reason> mla_extra_checks(const LayerConfig& c) {
  std::vector<Reason> r;
  if (!c.use_mla) return r;  // the generic use_mla reason already says it all
  if (c.kv_lora_rank <= 0 || c.kv_lora_rank >= c.head_size) {
    r.push_back({"kv_lora_rank", std::to_string(c.kv_lora_rank),
                 "in [1, head_size=" + std::to_string(c.head_size) + ") (head_size = kv_lora_rank + qk_rope_head_dim)"});
  } else if (c.qk_rope_head_dim && c.kv_lora_rank + c.qk_rope_head_dim != c.head_size) {
    r.push_back({"qk_rope_head_dim", std::to_string(c.qk_rope_head_dim),
                 std::to_string(c.head_size - c.kv_lora_rank) + " (head_size - kv_lora_rank)"});
  }
  if (c.head_size_v && c.head_size_v != c.kv_lora_rank) {
    r.push_back({"head_size_v", std::to_string(c.head_size_v),
                 "kv_lora_rank=" + std::to_string(c.kv_lora_rank) + " (the absorbed output is latent)"});
  }
  return r;
}

}  // namespace attn::mla
