#pragma once
/// The MLA layer implementation shared by cpu_mla (dense) and cpu_sparse (top-k sparse MLA, which
/// derives from it): absorbed-form forward over the latent cache, plus the expanded prefill form.
#include <memory>
#include <string>

#include "attn/backend.hpp"
#include "kernels/gather/mla_expanded.hpp"
#include "kernels/gather/mla_kernel.hpp"

namespace attn::mla {

class MlaImpl : public AttentionImpl {
 public:
  explicit MlaImpl(const LayerParams& params, std::string backend = "cpu_mla");
  /// Plans the form too: preferred_mla_form() is expanded when it needs fewer FLOPs for the step.
  std::shared_ptr<const StepPlan> plan(const BatchMetadata& md, const KVCacheSpec& cache) const override;
  /// args.mla_form absorbed: q [num_tokens, num_heads, kv_lora_rank + rope] → out [.., kv_lora_rank].
  /// expanded (needs mla_w_uk / mla_w_uv): q [num_tokens, num_heads, qk_nope + rope] (rope last) → out [.., v_head_dim];
  /// K = [c·W_UK[h] | k_pe], V = c·W_UV[h] for every cached position.
  RunResult run(const StepPlan& plan, const ForwardArgs& args) const override;
  /// The kernel build, as the descriptor's variant names it for this layer; the form a run took is
  /// RunResult's own field (both forms are always served).
  std::string variant() const override { return variant_; }

 protected:
  /// The absorbed form under a plan from plan() (topk: the sparse layers' indices, else null),
  /// in args.workspace (grown if it is smaller than the run needs) or a scratch of its own.
  void absorbed_run(const StepPlan& plan, const ForwardArgs& args, const TensorView* topk) const;
  MlaShape shape_;
  UpProjections up_;
  std::string variant_;
};

/// The softmax scale for an MLA layer: params.scale, else 1/sqrt(qk_nope + qk_rope) (the
/// per-head q·k width of the un-absorbed model), else 1/sqrt(head_size).
float mla_scale(const LayerParams& params);

/// What the dense and sparse MLA descriptors share (capabilities, priority, the latent cache
/// layout and its preferred block size), and their common extra checks.
BackendDescriptor mla_descriptor_base();
std::vector<Reason> mla_extra_checks(const LayerConfig& cfg);
std::string mla_variant_name(const Platform& platform, const LayerConfig& config);

}  // namespace attn::mla
