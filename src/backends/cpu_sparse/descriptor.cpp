// cpu_sparse: DeepSeek V3.2 sparse attention (DSA) — MLA restricted to each token's top-k
// cache positions. It shares cpu_mla's latent cache and kernel; only the key list differs, so
// cost scales with topk, not with context length.
#include "backends/cpu_mla/mla_impl.hpp"

namespace attn {

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
  d.variant = [](const Platform& p) { return mla::variant_for(p) + " topk"; };
  d.create = [](const LayerParams& p) -> std::unique_ptr<AttentionImpl> { return std::make_unique<mla::SparseMlaImpl>(p); };
  return d;
}

}  // namespace attn
