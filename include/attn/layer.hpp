#pragma once
/// One attention layer as a host holds it: the selector's decision for its config, the chosen
/// backend's descriptor and the implementation built for the layer. The Python module, the CLI,
/// the tuner, the bench and the engine integrations all wrap this one object.
///
///   attn::Layer layer(params);                           // selects, builds the implementation
///   attn::KVCache cache(layer.cache_spec(num_blocks));   // the layout / dtype / block size it reads
///   attn::StepPlans plans(md);                           // once per engine step
///   layer.run(plans.for_layer(layer, cache.spec()), args);   // ForwardArgs: q, out, &cache, ...
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attn/backend.hpp"
#include "attn/selector.hpp"
#include "attn/step.hpp"

namespace attn {

/// Holds no per-call state: run() and write_kv() are const, so any number of threads may run one
/// layer at once (one Workspace each).
class Layer {
 public:
  /// Selects the backend for params.config (a forced backend in `options` that cannot serve the
  /// layer throws its reasons), runs a tuned decision's kernel variant unless params names one,
  /// and builds the implementation.
  explicit Layer(LayerParams params, const SelectOptions& options = {});
  /// The layer on `backend`, named by the caller (check, bench, tests): selected with it forced
  /// and ATTN_BACKEND ignored, so a backend that cannot serve the layer says why.
  static Layer on_backend(const std::string& backend, LayerParams params);

  const LayerParams& params() const { return params_; }
  const LayerConfig& config() const { return params_.config; }
  const Decision& decision() const { return decision_; }
  const BackendDescriptor& descriptor() const { return *descriptor_; }
  const AttentionImpl& impl() const { return *impl_; }
  const std::string& backend() const { return decision_.backend; }
  /// The kernel variant that runs (empty when the backend has one).
  std::string variant() const { return impl_->variant(); }
  /// The KV block size for this layer: the user's, else the measured or the backend's preferred.
  int32_t block_size() const { return decision_.block_size; }
  /// Where run() reads the cache, q / out and the workspace.
  DeviceKind device() const { return descriptor_->device; }

  /// The cache this layer's backend reads: its layout, storage dtype and `block_size` (0: the
  /// layer's block_size()).
  KVCacheSpec cache_spec(int32_t num_blocks, int32_t block_size = 0) const;
  /// The width of one output row over a cache of `cache`: v_head_dim in MLA's expanded form, the
  /// latent value width in its absorbed form, else head_size_v.
  int32_t out_width(const KVCacheSpec& cache, MlaForm form = MlaForm::absorbed) const;
  /// [num_tokens, num_heads, out_width(cache, form)].
  std::vector<int64_t> out_shape(int64_t num_tokens, const KVCacheSpec& cache, MlaForm form = MlaForm::absorbed) const;

  /// AttentionImpl's plan / run / write_kv for this layer (see attn/step.hpp).
  std::shared_ptr<const StepPlan> plan(const BatchMetadata& md, const KVCacheSpec& cache) const {
    return impl_->plan(md, cache);
  }
  RunResult run(const StepPlan& plan, const ForwardArgs& args) const { return impl_->run(plan, args); }
  void write_kv(const TensorView& k, const TensorView& v, KVCache& cache, const BatchMetadata& md) const {
    impl_->write_kv(k, v, cache, md);
  }

  std::string to_string() const;  // "Layer(backend='cpu_flash', variant='avx512_bf16', LayerConfig(...))"

 private:
  Layer(LayerParams params, Decision decision);
  LayerParams params_;
  Decision decision_;
  std::shared_ptr<const BackendDescriptor> descriptor_;
  std::unique_ptr<AttentionImpl> impl_;
};

/// One engine step's plans: one per (backend, config, kernel variant, thread count, cache
/// geometry), planned on the first layer that asks and shared by every layer of that group. Built and read by one
/// thread (the step's driver); the plans themselves are immutable and may be run from any.
class StepPlans {
 public:
  explicit StepPlans(BatchMetadata md) : md_(std::move(md)) {}
  /// The plan `layer` runs this step over a cache of `cache`'s geometry.
  const StepPlan& for_layer(const Layer& layer, const KVCacheSpec& cache);
  std::shared_ptr<const StepPlan> shared_for_layer(const Layer& layer, const KVCacheSpec& cache);
  const BatchMetadata& metadata() const { return md_; }
  /// Scratch bytes the largest plan's run needs (one Workspace serves every layer).
  std::size_t workspace_bytes() const;
  /// How many distinct plans the step has so far.
  std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string backend, variant;
    int num_threads;
    std::shared_ptr<const StepPlan> plan;
  };
  BatchMetadata md_;
  std::vector<Entry> entries_;  // a handful of layer groups: a linear search beats hashing configs
};

}  // namespace attn
