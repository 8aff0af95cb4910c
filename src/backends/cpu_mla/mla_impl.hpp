#pragma once
/// The MLA layer implementation shared by cpu_mla (dense) and cpu_sparse (top-k sparse MLA):
/// absorbed-form forward over the latent cache, plus the expanded prefill form.
#include <memory>
#include <string>

#include "attn/backend.hpp"
#include "attn/sparse.hpp"
#include "backends/cpu_mla/mla_expanded.hpp"
#include "backends/cpu_mla/mla_kernel.hpp"

namespace attn::mla {

class MlaImpl : public AttentionImpl, public MlaAttention {
 public:
  explicit MlaImpl(const LayerParams& params);
  void forward(const TensorView& q, const KVCache& cache, const BatchMetadata& md, const TensorView& out) override;
  std::string variant() const override { return variant_ + " absorbed+expanded"; }

  void set_up_projections(const TensorView& w_uk, const TensorView& w_uv) override;
  void forward_expanded(const TensorView& q, const KVCache& cache, const BatchMetadata& md, const TensorView& out) override;
  bool expanded_pays_off(const BatchMetadata& md) const override;
  std::string last_form() const override { return last_form_; }

 protected:
  LayerParams params_;
  MlaShape shape_;
  UpProjections up_;
  std::string variant_;
  std::string last_form_;
};

/// cpu_sparse's implementation: the same kernel restricted to per-token top-k positions.
class SparseMlaImpl final : public MlaImpl, public TopkSparseAttention {
 public:
  using MlaImpl::MlaImpl;
  void set_topk_indices(const TensorView& indices) override;
  void forward(const TensorView& q, const KVCache& cache, const BatchMetadata& md, const TensorView& out) override;
  std::string variant() const override { return variant_ + " topk"; }
  void forward_expanded(const TensorView&, const KVCache&, const BatchMetadata&, const TensorView&) override;
  bool expanded_pays_off(const BatchMetadata&) const override { return false; }

 private:
  TensorView topk_{};
  bool has_topk_ = false;
};

/// The softmax scale for an MLA layer: params.scale, else 1/sqrt(qk_nope + qk_rope) (the
/// per-head q·k width of the un-absorbed model), else 1/sqrt(head_size).
float mla_scale(const LayerParams& params);

/// What the dense and sparse MLA descriptors share (capabilities, priority, the latent cache
/// layout and its preferred block size), and their common extra checks.
BackendDescriptor mla_descriptor_base();
std::vector<Reason> mla_extra_checks(const LayerConfig& cfg);
std::string mla_variant_name(const LayerConfig& config);

}  // namespace attn::mla
