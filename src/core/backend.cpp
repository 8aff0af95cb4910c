#include "attn/backend.hpp"

#include <algorithm>
#include <cmath>

#include "attn/error.hpp"
#include "attn/limits.hpp"
#include "cpu/isa.hpp"

namespace attn {

float LayerParams::effective_scale() const {
  return scale > 0.0f ? scale : 1.0f / std::sqrt(float(config.head_size));
}

void LayerParams::validate() const {
  config.validate();
  require(std::isfinite(scale) && scale >= 0.0f, "scale", scale, "a finite value >= 0 (0 = 1/sqrt(head_size))");
  if (config.has_sink) {
    require(int(sinks.size()) == config.num_heads, "sinks.size()", sinks.size(),
            "num_heads = " + std::to_string(config.num_heads) + " (has_sink=true)");
    for (std::size_t i = 0; i < sinks.size(); ++i)
      require(std::isfinite(sinks[i]), "sinks[" + std::to_string(i) + "]", sinks[i], "a finite logit");
  } else {
    require(sinks.empty(), "sinks.size()", sinks.size(), "0 (has_sink=false)");
  }
  if (config.use_alibi) {
    require(alibi_slopes.empty() || int(alibi_slopes.size()) == config.num_heads, "alibi_slopes.size()", alibi_slopes.size(),
            "0 (standard slopes) or num_heads = " + std::to_string(config.num_heads));
    // A NaN slope would make every score of its head NaN on one backend and be skipped on another.
    for (std::size_t i = 0; i < alibi_slopes.size(); ++i)
      require(std::isfinite(alibi_slopes[i]), "alibi_slopes[" + std::to_string(i) + "]", alibi_slopes[i], "a finite slope");
  } else {
    require(alibi_slopes.empty(), "alibi_slopes.size()", alibi_slopes.size(), "0 (use_alibi=false)");
  }
  check_threads("num_threads", num_threads);
}

std::vector<float> alibi_slopes(int n) {
  std::vector<float> out;
  int closest = 1;
  while (closest * 2 <= n) closest *= 2;
  const double base = std::pow(2.0, -8.0 / closest);
  for (int i = 1; i <= closest; ++i) out.push_back(float(std::pow(base, i)));
  if (closest < n) {
    const double extra = std::pow(2.0, -4.0 / closest);  // 2^(-8 / (2*closest))
    for (int i = 0; i < n - closest; ++i) out.push_back(float(std::pow(extra, 1 + 2 * i)));
  }
  return out;
}

void AttentionImpl::write_kv(const TensorView& k, const TensorView& v, KVCache& cache, const BatchMetadata& md) const {
  cache.write(k, v, md);
}

void AttentionImpl::write_planned_kv(const TensorView& k, const TensorView& v, KVCache& cache, const BatchMetadata& md) const {
  cache.write_validated(k, v, md);
}

namespace {
bool serves(const std::vector<DType>& dtypes, DType d) { return dtypes.empty() || std::ranges::find(dtypes, d) != dtypes.end(); }

/// The CPU whose kernels read a cache made here: this machine, without the features above the
/// build ATTN_CPU_ISA forces (so a forced AVX2 run gets the layout AVX2 kernels stream).
Platform kernel_cpu() {
  Platform p = detect_cpu();
  const std::optional<cpu::Isa> forced = cpu::forced_isa();
  if (!forced || *forced == cpu::Isa::amx) return p;
  const Platform cap = parse_platform("cpu:" + std::string(cpu::to_string(*forced)));
  std::erase_if(p.features, [&](CpuFeature f) { return !cap.has(f); });
  return p;
}

/// The layout `s` gets from a backend declaring `want` under `rule` (see KVLayoutRule), read on
/// `platform` (null: kernel_cpu()).
KVLayout kept_layout(KVLayout want, const std::optional<KVLayoutRule>& rule, const KVCacheSpec& s, DType q_dtype,
                     const Platform* platform) {
  if (!rule) return want;
  if (!layout_fits_sizes(s) || !serves(rule->q_dtypes, q_dtype) || !serves(rule->storage_dtypes, s.dtype))
    return rule->otherwise;
  if (rule->cpu_features.empty()) return want;
  const Platform p = platform ? *platform : kernel_cpu();
  const bool has_features = p.kind != PlatformKind::cpu || std::ranges::all_of(rule->cpu_features, [&](CpuFeature f) { return p.has(f); });
  return has_features ? want : rule->otherwise;
}
}  // namespace

KVCacheSpec BackendDescriptor::cache_spec(const LayerConfig& cfg, int32_t num_blocks, int32_t block_size,
                                          const Platform* platform) const {
  KVCacheSpec s;
  s.num_blocks = num_blocks;
  s.block_size = block_size ? block_size : (cfg.block_size ? cfg.block_size : preferred_block_size);
  s.dtype = kv_storage_dtype(cfg.kv_cache_dtype, cfg.dtype);
  s.kv_cache_dtype = cfg.kv_cache_dtype;
  s.layout = kv_layout;
  s.per_head_scales = cfg.use_per_head_quant_scales;
  if (kv_layout == KVLayout::MLA) {
    s.num_kv_heads = 1;
    s.head_size = cfg.head_size;
    s.head_size_v = cfg.kv_lora_rank ? cfg.kv_lora_rank : cfg.effective_head_size_v();
  } else {
    s.num_kv_heads = cfg.num_kv_heads;
    s.head_size = cfg.head_size;
    s.head_size_v = cfg.effective_head_size_v();
  }
  s.layout = kept_layout(kv_layout, kv_layout_rule, s, cfg.dtype, platform);  // s holds kv_layout: its sizes are checked against it
  return s;
}

namespace {
int out_width(const LayerConfig& c, const KVCacheSpec& s) {
  return s.layout == KVLayout::MLA ? s.v_width() : c.effective_head_size_v();
}
}  // namespace

void check_plan_args(const LayerParams& p, const BatchMetadata& md, const KVCacheSpec& s) {
  const LayerConfig& c = p.config;
  if (s.layout != KVLayout::MLA) {
    ATTN_REQUIRE(s.num_kv_heads == c.num_kv_heads, "cache.num_kv_heads", s.num_kv_heads,
                 "the layer's num_kv_heads " + std::to_string(c.num_kv_heads));
    ATTN_REQUIRE(s.v_width() == out_width(c, s), "cache.head_size_v", s.v_width(),
                 "the layer's head_size_v " + std::to_string(out_width(c, s)));
  }
  ATTN_REQUIRE(s.head_size == c.head_size, "cache.head_size", s.head_size, "the layer's head_size " + std::to_string(c.head_size));
  const DType want = kv_storage_dtype(c.kv_cache_dtype, c.dtype);
  ATTN_REQUIRE(s.dtype == want, "cache.dtype", to_string(s.dtype),
               std::string(to_string(want)) + " for kv_cache_dtype " + std::string(to_string(c.kv_cache_dtype)));
  md.validate(s.num_blocks, s.block_size);
  check_causal(c, md);  // an encoder layer handed causal metadata would silently mask the future
}

void check_run_tensors(const LayerParams& p, const KVCacheSpec& s, int32_t num_tokens, const TensorView& q,
                       const TensorView& out) {
  const LayerConfig& c = p.config;
  check_tensor(q, "q", 3, {DType::float32, DType::float16, DType::bfloat16}, {num_tokens, c.num_heads, c.head_size});
  check_tensor(out, "out", 3, {DType::float32, DType::float16, DType::bfloat16}, {num_tokens, c.num_heads, out_width(c, s)});
  ATTN_REQUIRE(q.dtype == c.dtype, "q.dtype", to_string(q.dtype), "the layer dtype " + std::string(to_string(c.dtype)));
  ATTN_REQUIRE(out.dtype == c.dtype, "out.dtype", to_string(out.dtype), "the layer dtype " + std::string(to_string(c.dtype)));
  // Output rows must not overlap the input (kernels write out while still reading q).
  const char* qb = static_cast<const char*>(q.data);
  const char* ob = static_cast<const char*>(out.data);
  const std::size_t qn = std::size_t(q.numel()) * dtype_size(q.dtype), on = std::size_t(out.numel()) * dtype_size(out.dtype);
  ATTN_REQUIRE(qn == 0 || on == 0 || qb + qn <= ob || ob + on <= qb, "out.data", "overlaps q", "a buffer distinct from q");
}

std::shared_ptr<const StepPlan> AttentionImpl::plan(const BatchMetadata& md, const KVCacheSpec& cache) const {
  check_plan_args(params_, md, cache);
  return std::make_shared<StepPlan>(backend_, params_.config, md, cache);
}

const KVCache& AttentionImpl::cache_of(const ForwardArgs& args) {
  ATTN_REQUIRE(args.cache != nullptr, "args.cache", "null", "the layer's KV cache");
  return *args.cache;
}

void AttentionImpl::begin_run(const StepPlan& plan, const ForwardArgs& args, bool check_tensors) const {
  ATTN_REQUIRE(plan.backend() == backend_, "plan.backend", plan.backend(), "a plan made by " + backend_ + " (this layer's backend)");
  ATTN_REQUIRE(plan.config() == params_.config, "plan.config", plan.config().to_string(),
               "this layer's config " + params_.config.to_string() + " (plans are shared only by equal configs)");
  const KVCache& cache = cache_of(args);
  ATTN_REQUIRE(cache.device() == device_, "cache.device", cache.device() == DeviceKind::cpu ? "cpu" : "cuda",
               std::string(device_ == DeviceKind::cpu ? "cpu" : "cuda") + ": the memory " + backend_ + " reads");
  const KVCacheSpec& s = cache.spec();
  ATTN_REQUIRE(s == plan.cache_spec(), "cache", s.to_string(), "the geometry the plan was made for: " + plan.cache_spec().to_string());
  const BatchMetadata& md = plan.metadata();
  if (check_tensors) check_run_tensors(params_, s, md.num_tokens, args.q, args.out);
  const bool has_k = args.new_k.data || args.new_k.ndim, has_v = args.new_v.data || args.new_v.ndim;
  ATTN_REQUIRE(has_k == has_v, "args.new_v", has_v ? "set" : "unset", has_k ? "set with new_k" : "unset without new_k");
  if (has_k) write_planned_kv(args.new_k, args.new_v, *args.cache, md);
}

void* AttentionImpl::scratch(const ForwardArgs& args, Workspace& own, std::size_t bytes) {
  Workspace& ws = args.workspace ? *args.workspace : own;
  if (ws.bytes() < bytes) ws.reserve(bytes);
  return ws.data();
}

RunResult AttentionImpl::forward(const BatchMetadata& md, const ForwardArgs& args) const {
  const auto p = plan(md, cache_of(args).spec());
  if (args.workspace) return run(*p, args);
  const KeptScratch kept(device_, p->workspace_bytes());
  ForwardArgs with_kept = args;
  with_kept.workspace = kept.get();
  return run(*p, with_kept);
}

void AttentionImpl::forward(const TensorView& q, const KVCache& cache, const BatchMetadata& md, const TensorView& out) const {
  ForwardArgs args;
  args.q = q, args.out = out;
  // run() writes the cache only for new_k / new_v, which this call does not pass.
  args.cache = const_cast<KVCache*>(&cache);
  forward(md, args);
}

}  // namespace attn
