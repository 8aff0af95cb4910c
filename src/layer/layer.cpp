// attn::Layer: a layer's decision, descriptor and implementation built together in one place.
#include "attn/layer.hpp"

#include <algorithm>

#include "attn/error.hpp"
#include "attn/registry.hpp"

namespace attn {

Layer::Layer(LayerParams params, const SelectOptions& options) : params_(std::move(params)) {
  params_.validate();  // sinks / slopes / up-projections first: their errors name the argument
  decision_ = select(params_.config, options);
  if (decision_.tuned && params_.variant.empty()) params_.variant = decision_.variant;  // the measured fastest
  Registry& registry = options.registry ? *options.registry : Registry::instance();
  impl_ = registry.create(decision_.backend, params_);
  descriptor_ = registry.find(decision_.backend);  // after create: a module may have provided the factory
}

Layer Layer::on_backend(const std::string& backend, LayerParams params) {
  SelectOptions o;
  o.backend = backend;
  o.use_env = false;
  return Layer(std::move(params), o);
}

KVCacheSpec Layer::cache_spec(int32_t num_blocks, int32_t block_size) const {
  return descriptor_->cache_spec(params_.config, num_blocks, block_size ? block_size : decision_.block_size);
}

int32_t Layer::out_width(const KVCacheSpec& cache, MlaForm form) const {
  if (form == MlaForm::expanded) return params_.config.v_head_dim;
  return cache.layout == KVLayout::MLA ? cache.v_width() : params_.config.effective_head_size_v();
}

std::vector<int64_t> Layer::out_shape(int64_t num_tokens, const KVCacheSpec& cache, MlaForm form) const {
  return {num_tokens, params_.config.num_heads, out_width(cache, form)};
}

std::string Layer::to_string() const {
  const std::string v = variant();
  return "Layer(backend='" + decision_.backend + "'" + (v.empty() ? "" : ", variant='" + v + "'") + ", " +
         params_.config.to_string() + ")";
}

std::shared_ptr<const StepPlan> StepPlans::shared_for_layer(const Layer& layer, const KVCacheSpec& cache) {
  const std::string variant = layer.variant();
  for (const Entry& e : entries_)
    if (e.backend == layer.backend() && e.variant == variant && e.num_threads == layer.params().num_threads &&
        e.plan->config() == layer.config() && e.plan->cache_spec() == cache)
      return e.plan;
  entries_.push_back({layer.backend(), variant, layer.params().num_threads, layer.plan(md_, cache)});
  return entries_.back().plan;
}

const StepPlan& StepPlans::for_layer(const Layer& layer, const KVCacheSpec& cache) {
  return *shared_for_layer(layer, cache);
}

std::size_t StepPlans::workspace_bytes() const {
  std::size_t bytes = 0;
  for (const Entry& e : entries_) bytes = std::max(bytes, e.plan->workspace_bytes());
  return bytes;
}

}  // namespace attn
