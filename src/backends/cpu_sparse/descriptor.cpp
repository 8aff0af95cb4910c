// cpu_sparse: DeepSeek V3.2 sparse attention (DSA) — MLA restricted to each token's top-k
// cache positions. It shares cpu_mla's latent cache and kernel (src/kernels/gather); only the
// key list differs, so cost scales with topk, not with context length.
#include "attn/error.hpp"
// From another backend's folder on purpose: cpu_sparse is cpu_mla's family (SparseMlaImpl derives
// from its MlaImpl and shares its descriptor base and checks).
#include "backends/cpu_mla/mla_impl.hpp"

namespace attn {

namespace mla {
namespace {

/// The MLA kernel restricted to per-token top-k positions (args.topk_indices: [num_tokens, topk]
/// int32, positions within the token's sequence, -1 = padding; later positions than the token's
/// own are skipped; a repeated position counts twice).
class SparseMlaImpl final : public MlaImpl {
 public:
  explicit SparseMlaImpl(const LayerParams& params) : MlaImpl(params, "cpu_sparse") {}
  RunResult run(const StepPlan& plan, const ForwardArgs& args) const override;
};

RunResult SparseMlaImpl::run(const StepPlan& plan, const ForwardArgs& args) const {
  ATTN_REQUIRE(args.mla_form != MlaForm::expanded, "mla_form", "expanded",
               "absorbed on a top-k sparse layer (the absorbed form reads only the listed positions)");
  const TensorView& idx = args.topk_indices;
  ATTN_REQUIRE(idx.data != nullptr || idx.ndim != 0, "topk_indices", "unset",
               "[num_tokens, topk] int32 indices in ForwardArgs on a use_sparse layer");
  check_tensor(idx, "topk_indices", 2, {DType::int32}, {plan.metadata().num_tokens, -1});
  ATTN_REQUIRE(idx.size(1) > 0, "topk_indices.shape[1]", idx.size(1), "at least 1 (topk)");
  begin_run(plan, args);
  absorbed_run(plan, args, &idx);
  return {variant_, "absorbed"};
}

}  // namespace
}  // namespace mla

BackendDescriptor cpu_sparse_descriptor() {
  BackendDescriptor d = mla::mla_descriptor_base();
  d.name = "cpu_sparse";
  d.summary = "top-k index sparse MLA (DeepSeek V3.2 DSA): each token attends to its indexer's top-k latent entries; "
              "indices in ForwardArgs::topk_indices";
  d.caps.sparse = true;
  d.extra_checks = [](const LayerConfig& c, const Platform&) {
    std::vector<Reason> r = mla::mla_extra_checks(c);
    if (c.use_sparse && c.index_topk <= 0)
      r.push_back({"index_topk", std::to_string(c.index_topk), "> 0 (top-k positions per query token)"});
    return r;
  };
  d.variant = [](const Platform& p, const LayerConfig& c) { return mla::mla_variant_name(p, c); };
  d.create = [](const LayerParams& p) -> std::unique_ptr<AttentionImpl> { return std::make_unique<mla::SparseMlaImpl>(p); };
  return d;
}

}  // namespace attn
