#include "backends/cpu_mla/mla_impl.hpp"

#include <cmath>

#include "attn/error.hpp"

namespace attn::mla {

float mla_scale(const LayerParams& p) {
  if (p.scale > 0.0f) return p.scale;
  const int qk = p.config.qk_nope_head_dim + p.config.qk_rope_head_dim;
  return qk > 0 && p.config.qk_nope_head_dim > 0 ? 1.0f / std::sqrt(float(qk)) : p.effective_scale();
}

std::string mla_variant_name(const Platform& p, const LayerConfig& c) {
  std::string name(variant_name(chosen_isa(p)));
  // The AMX and bf16-dot kernels serve bf16 / fp8 latent caches, the bf16-dot one fp8_ds_mla
  // entries too (per-tile scales); they hand the others to the avx512 one.
  const DType storage = kv_storage_dtype(c.kv_cache_dtype, c.dtype);
  const bool ds_mla = c.kv_cache_dtype == KVCacheDType::fp8_ds_mla;
  if (name == "amx" && (ds_mla || !(amx_handles_storage(storage) && c.kv_lora_rank % 32 == 0)))
    name = "avx512";
  if (name == "avx512_bf16" && !bf16_handles_storage(storage, c.kv_lora_rank)) name = "avx512";
  return name;
}

namespace {

/// The MLA step plan: the validated metadata, the absorbed form's tiles and splits, and whether the
/// expanded form is cheaper.
class MlaStepPlan final : public StepPlan {
 public:
  MlaStepPlan(std::string backend, const LayerConfig& c, const BatchMetadata& md, const KVCacheSpec& spec,
              const MlaShape& shape, bool expanded_cheaper)
      : StepPlan(std::move(backend), c, md, spec),
        topk_(c.use_sparse ? c.index_topk : 0),
        tiles_(plan_absorbed(shape, metadata(), topk_)),
        workspace_(absorbed_workspace_bytes(shape, tiles_, metadata().num_tokens, topk_)),
        expanded_cheaper_(expanded_cheaper) {}
  MlaForm preferred_mla_form() const override { return expanded_cheaper_ ? MlaForm::expanded : MlaForm::absorbed; }
  std::size_t workspace_bytes() const override { return workspace_; }
  std::string to_string() const override {
    return StepPlan::to_string() + ", " + std::to_string(tiles_.tiles.size()) + " tiles in " +
           std::to_string(tiles_.tasks.size()) + " tasks, expanded form " + (expanded_cheaper_ ? "cheaper" : "not cheaper");
  }
  const TilePlan& tiles() const { return tiles_; }

 private:
  int topk_;
  TilePlan tiles_;
  std::size_t workspace_;
  bool expanded_cheaper_;
};

/// Converts up-projection weights given with the layer, checking their sizes.
UpProjections take_up_projections(LayerParams& p) {
  const LayerConfig& c = p.config;
  UpProjections up;
  if (p.mla_w_uk.empty() && p.mla_w_uv.empty()) return up;
  require(c.qk_nope_head_dim > 0 && c.v_head_dim > 0, "qk_nope_head_dim/v_head_dim",
          std::to_string(c.qk_nope_head_dim) + "/" + std::to_string(c.v_head_dim), "both > 0 in the layer config (mla_w_uk / mla_w_uv given)");
  const std::size_t uk = std::size_t(c.num_heads) * c.kv_lora_rank * c.qk_nope_head_dim;
  const std::size_t uv = std::size_t(c.num_heads) * c.kv_lora_rank * c.v_head_dim;
  require(p.mla_w_uk.size() == uk, "mla_w_uk.size()", p.mla_w_uk.size(), std::to_string(uk) + " = num_heads * kv_lora_rank * qk_nope_head_dim");
  require(p.mla_w_uv.size() == uv, "mla_w_uv.size()", p.mla_w_uv.size(), std::to_string(uv) + " = num_heads * kv_lora_rank * v_head_dim");
  up.nope = c.qk_nope_head_dim;
  up.v_dim = c.v_head_dim;
  up.w_uk = std::move(p.mla_w_uk);  // held once, by the kernel's structure
  up.w_uv = std::move(p.mla_w_uv);
  p.mla_w_uk.clear(), p.mla_w_uv.clear();
  return up;
}

}  // namespace

MlaImpl::MlaImpl(const LayerParams& params, std::string backend) : AttentionImpl(std::move(backend), params) {
  params_.validate();
  const LayerConfig& c = params_.config;
  shape_.num_heads = c.num_heads;
  shape_.rank = c.kv_lora_rank;
  shape_.rope = c.head_size - c.kv_lora_rank;
  shape_.scale = mla_scale(params_);
  shape_.num_threads = params_.num_threads;
  variant_ = mla_variant_name(detect_cpu(), c);
  up_ = take_up_projections(params_);
}

std::shared_ptr<const StepPlan> MlaImpl::plan(const BatchMetadata& md, const KVCacheSpec& spec) const {
  check_plan_args(params_, md, spec);
  const LayerConfig& c = params_.config;
  const bool cheaper = !c.use_sparse && c.qk_nope_head_dim > 0 && c.v_head_dim > 0 &&
                       expanded_flops(shape_, c.qk_nope_head_dim, c.v_head_dim, md) < absorbed_flops(shape_, md);
  return std::make_shared<MlaStepPlan>(backend_, c, md, spec, shape_, cheaper);
}

RunResult MlaImpl::run(const StepPlan& plan, const ForwardArgs& args) const {
  if (args.mla_form == MlaForm::expanded) {
    ATTN_REQUIRE(!up_.empty(), "mla_form", "expanded", "a layer created with mla_w_uk / mla_w_uv (the expanded form's up-projections)");
    begin_run(plan, args, /*check_tensors=*/false);  // q / out have the expanded widths: checked by the kernel
    require(args.q.dtype == params_.config.dtype, "q.dtype", to_string(args.q.dtype), "the layer dtype");
    require(args.out.dtype == params_.config.dtype, "out.dtype", to_string(args.out.dtype), "the layer dtype");
    expanded_forward(shape_, up_, args.q, *args.cache, plan.metadata(), args.out);
    return {variant_, "expanded"};
  }
  begin_run(plan, args);
  absorbed_run(plan, args, nullptr);
  return {variant_, "absorbed"};
}

void MlaImpl::absorbed_run(const StepPlan& plan, const ForwardArgs& args, const TensorView* topk) const {
  const auto* mp = dynamic_cast<const MlaStepPlan*>(&plan);
  ATTN_REQUIRE(mp != nullptr, "plan", plan.backend(), "a plan made by this layer's plan()");
  const int T = plan.metadata().num_tokens, K = topk ? int(topk->size(1)) : 0;
  Workspace own;
  void* ws = scratch(args, own, absorbed_workspace_bytes(shape_, mp->tiles(), T, K));
  absorbed_forward(shape_, mp->tiles(), args.q, *args.cache, plan.metadata(), args.out, topk, ws);
}

BackendDescriptor mla_descriptor_base() {
  BackendDescriptor d;
  Capabilities& caps = d.caps;
  caps.dtypes = {DType::float32, DType::float16, DType::bfloat16};
  caps.kv_cache_dtypes = {KVCacheDType::auto_, KVCacheDType::float16, KVCacheDType::bfloat16,
                          KVCacheDType::fp8, KVCacheDType::fp8_e4m3, KVCacheDType::fp8_e5m2,
                          KVCacheDType::fp8_ds_mla};
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
  if (c.kv_cache_dtype == KVCacheDType::fp8_ds_mla && (c.kv_lora_rank != ds_mla::kRank || c.head_size != ds_mla::kRank + ds_mla::kRope)) {
    r.push_back({"kv_cache_dtype", "fp8_ds_mla",
                 "kv_lora_rank 512 and head_size 576 for its fixed entry (this layer: kv_lora_rank " +
                     std::to_string(c.kv_lora_rank) + ", head_size " + std::to_string(c.head_size) + ")"});
  }
  if (c.head_size_v && c.head_size_v != c.kv_lora_rank) {
    r.push_back({"head_size_v", std::to_string(c.head_size_v),
                 "kv_lora_rank=" + std::to_string(c.kv_lora_rank) + " (the absorbed output is latent)"});
  }
  return r;
}

}  // namespace attn::mla
