// cpu_blocksparse: Phi-3-small's local + vertical-stride block-sparse attention (vLLM v0
// BLOCKSPARSE_FLASH_ATTN) over the regular NHD paged cache; masked blocks are skipped entirely.
#include "attn/backend.hpp"
#include "attn/error.hpp"
#include "kernels/gather/mla_kernel.hpp"
#include "backends/cpu_blocksparse/blocksparse_forward.hpp"

namespace attn {
namespace {

/// The step's tiles and the workspace a run of them needs.
class BlockSparseStepPlan final : public StepPlan {
 public:
  BlockSparseStepPlan(const LayerConfig& c, const BatchMetadata& md, const KVCacheSpec& spec,
                      const blocksparse::Shape& shape, const blocksparse::Pattern& pattern)
      : StepPlan("cpu_blocksparse", c, md, spec),
        tiles_(blocksparse::plan_tiles(shape, pattern, metadata())),
        workspace_(blocksparse::workspace_bytes(shape, tiles_, metadata().num_tokens)) {}
  std::size_t workspace_bytes() const override { return workspace_; }
  std::string to_string() const override {
    return StepPlan::to_string() + ", " + std::to_string(tiles_.tiles.size()) + " tiles in " +
           std::to_string(tiles_.tasks.size()) + " tasks";
  }
  const mla::TilePlan& tiles() const { return tiles_; }

 private:
  mla::TilePlan tiles_;
  std::size_t workspace_;
};

class BlockSparseImpl final : public AttentionImpl {
 public:
  explicit BlockSparseImpl(const LayerParams& p) : AttentionImpl("cpu_blocksparse", p) {
    params_.validate();
    const LayerConfig& c = p.config;
    shape_ = {c.num_heads, c.num_kv_heads, c.head_size, c.effective_head_size_v(), p.effective_scale(), p.num_threads};
    pattern_ = {c.bs_block_size, c.bs_local_blocks, c.bs_vert_stride, c.bs_head_sliding_step};
    variant_ = mla::variant_for(detect_cpu(), /*latent=*/false);
  }
  std::shared_ptr<const StepPlan> plan(const BatchMetadata& md, const KVCacheSpec& spec) const override {
    check_plan_args(params_, md, spec);
    return std::make_shared<BlockSparseStepPlan>(params_.config, md, spec, shape_, pattern_);
  }
  RunResult run(const StepPlan& plan, const ForwardArgs& args) const override {
    const auto* bp = dynamic_cast<const BlockSparseStepPlan*>(&plan);
    ATTN_REQUIRE(bp != nullptr, "plan", plan.backend(), "a plan made by this layer's plan()");
    begin_run(plan, args);
    Workspace own;
    void* ws = scratch(args, own, bp->workspace_bytes());
    blocksparse::forward(shape_, pattern_, bp->tiles(), args.q, *args.cache, plan.metadata(), args.out, ws);
    return {variant_, {}};
  }
  std::string variant() const override { return variant_; }

 private:
  blocksparse::Shape shape_;
  blocksparse::Pattern pattern_;
  std::string variant_;
};

std::vector<Reason> pattern_checks(const LayerConfig& c) {
  std::vector<Reason> r;
  if (!c.use_block_sparse) return r;
  auto positive = [&](const char* field, int v, const char* what) {
    if (v <= 0) r.push_back({field, std::to_string(v), std::string("> 0 (") + what + ")"});
  };
  positive("bs_block_size", c.bs_block_size, "tokens per sparse block");
  positive("bs_local_blocks", c.bs_local_blocks, "local blocks, the diagonal one included");
  positive("bs_vert_stride", c.bs_vert_stride, "vertical stride in blocks");
  return r;
}

}  // namespace

BackendDescriptor cpu_blocksparse_descriptor() {
  BackendDescriptor d;
  d.name = "cpu_blocksparse";
  d.summary = "block-sparse attention (Phi-3-small local + vertical-stride pattern) over the NHD paged cache, "
              "skipping masked blocks";
  d.caps.dtypes = {DType::float32, DType::float16, DType::bfloat16};
  d.caps.kv_cache_dtypes = {KVCacheDType::auto_, KVCacheDType::float16, KVCacheDType::bfloat16,
                            KVCacheDType::fp8, KVCacheDType::fp8_e4m3, KVCacheDType::fp8_e5m2};
  d.caps.head_sizes = SizeRule::any();
  d.caps.block_sizes = SizeRule::any();
  d.caps.distinct_head_size_v = true;
  d.caps.block_sparse = true;
  d.caps.per_head_quant_scales = true;
  d.priority = 10;
  d.preferred_block_size = 16;
  d.kv_layout = KVLayout::NHD;
  d.extra_checks = [](const LayerConfig& c, const Platform&) { return pattern_checks(c); };
  d.variant = [](const Platform& p, const LayerConfig&) { return mla::variant_for(p, /*latent=*/false); };
  d.create = [](const LayerParams& p) -> std::unique_ptr<AttentionImpl> { return std::make_unique<BlockSparseImpl>(p); };
  return d;
}

}  // namespace attn
