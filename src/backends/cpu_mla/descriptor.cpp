// cpu_mla: DeepSeek multi-head latent attention over the latent paged cache (dense layers).
#include "backends/cpu_mla/mla_impl.hpp"

namespace attn {

BackendDescriptor cpu_mla_descriptor() {
  BackendDescriptor d = mla::mla_descriptor_base();
  d.name = "cpu_mla";
  d.summary = "multi-head latent attention (DeepSeek V2/V3): latent cache kv_lora_rank + rope shared by all heads; "
              "absorbed decode/chunked prefill, expanded prefill";
  d.extra_checks = [](const LayerConfig& c, const Platform&) { return mla::mla_extra_checks(c); };
  d.variant = [](const Platform& p, const LayerConfig& c) { return mla::mla_variant_name(p, c); };
  d.create = [](const LayerParams& p) -> std::unique_ptr<AttentionImpl> { return std::make_unique<mla::MlaImpl>(p); };
  return d;
}

}  // namespace attn
