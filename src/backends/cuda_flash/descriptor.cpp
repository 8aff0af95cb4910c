// cuda_flash's descriptor. Compiled into the core (libattn) so that planning for a GPU works on
// machines without one; the factory comes from the lazily loaded module libattn_cuda.so.
#include "attn/backend.hpp"
#include "backends/cuda_flash/limits.hpp"

namespace attn {

namespace {

Capabilities cuda_flash_capabilities() {
  using namespace cuda_flash;
  Capabilities c;
  c.platforms = {PlatformKind::cuda};
  c.min_cc = ComputeCapability{kMinCcMajor, kMinCcMinor};
  c.dtypes = {DType::float16, DType::bfloat16};
  c.kv_cache_dtypes = {KVCacheDType::auto_, KVCacheDType::float16, KVCacheDType::bfloat16, KVCacheDType::fp8,
                       KVCacheDType::fp8_e4m3};
  c.head_sizes = SizeRule::range(kMinHead, kMaxHead, kHeadStep);
  c.block_sizes = SizeRule::multiple_of({kBlockMultiple});
  c.sinks = true;
  c.sliding_window = true;
  c.soft_cap = true;
  c.per_head_quant_scales = true;
  c.attn_types = {AttnType::decoder};
  return c;
}

// The tensor-core tiles multiply q by K in q's dtype, so a 16-bit cache must hold that same
// dtype (fp8 caches are widened exactly to either).
std::vector<Reason> cuda_flash_extra_checks(const LayerConfig& cfg, const Platform&) {
  std::vector<Reason> reasons;
  const bool f16_cache = cfg.kv_cache_dtype == KVCacheDType::float16;
  const bool bf16_cache = cfg.kv_cache_dtype == KVCacheDType::bfloat16;
  if ((f16_cache && cfg.dtype != DType::float16) || (bf16_cache && cfg.dtype != DType::bfloat16)) {
    reasons.push_back({"kv_cache_dtype", std::string(to_string(cfg.kv_cache_dtype)) + " with dtype=" +
                                             std::string(to_string(cfg.dtype)),
                       "auto, fp8, fp8_e4m3 or the model dtype (" + std::string(to_string(cfg.dtype)) + ")"});
  }
  return reasons;
}

// Which compiled code runs: the cubin of the newest built arch of the same major version, else
// the PTX of the newest arch, JIT-compiled by the driver.
std::string cuda_flash_variant(const Platform& p, const LayerConfig&) {
  if (p.kind != PlatformKind::cuda) return "sm_80 / sm_89 / sm_90 cubins + PTX, mma.sync";
  int best = 0;
  for (int arch : cuda_flash::kBuiltArchs)
    if (arch / 10 == p.cc.major && arch % 10 <= p.cc.minor) best = arch;
  if (best) return "sm_" + std::to_string(best) + " mma.sync";
  return "compute_" + std::to_string(cuda_flash::kBuiltArchs[std::size(cuda_flash::kBuiltArchs) - 1]) +
         " PTX (JIT) mma.sync";
}

}  // namespace

BackendDescriptor cuda_flash_descriptor() {
  BackendDescriptor d;
  d.name = "cuda_flash";
  d.summary = "NVIDIA GPUs (sm_80+): paged flash attention, split-KV decode, tensor-core prefill";
  d.caps = cuda_flash_capabilities();
  d.priority = 10;
  d.preferred_block_size = 16;
  d.kv_layout = KVLayout::NHD;
  d.device = DeviceKind::cuda;  // caches, q / out and workspaces in GPU memory (Registry::allocator)
  d.module = "attn_cuda";
  d.extra_checks = cuda_flash_extra_checks;
  d.variant = cuda_flash_variant;
  return d;
}

}  // namespace attn
