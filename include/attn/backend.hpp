#pragma once
/// A backend: its descriptor (capabilities, priority, factory — all data) and the per-layer
/// implementation interface (plan once per step, run per layer over the paged cache).
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attn/capabilities.hpp"
#include "attn/kv_cache.hpp"
#include "attn/layer_config.hpp"
#include "attn/metadata.hpp"
#include "attn/step.hpp"
#include "attn/tensor.hpp"

namespace attn {

/// Per-layer parameters beyond the selector key.
struct LayerParams {
  LayerConfig config;
  float scale = 0.0f;                 // softmax scale; 0 → 1/sqrt(head_size)
  std::vector<float> sinks;           // [num_heads] sink logits, required iff has_sink
  std::vector<float> alibi_slopes;    // [num_heads], required iff use_alibi (empty → standard slopes)
  int num_threads = 0;                // 0 → all cores
  /// The kernel variant to run: "" = the backend's own choice on this machine; else one of its
  /// BackendDescriptor::variants (how `attn tune` times each one, and how a tuned Decision's
  /// variant runs: set it from Decision::variant when Decision::tuned).
  std::string variant;
  /// MLA layers, optional: the up-projections the expanded form needs, row-major float32.
  /// W_UK [num_heads, kv_lora_rank, qk_nope_head_dim], W_UV [num_heads, kv_lora_rank, v_head_dim].
  std::vector<float> mla_w_uk, mla_w_uv;

  float effective_scale() const;
  /// Throws attn::Error if sinks / slopes do not match the config.
  void validate() const;
};

/// One layer served by one backend: plan once per step, run once per layer (see attn/step.hpp).
/// Holds only what `create` set up; run() is const and safe to call from several threads.
class AttentionImpl {
 public:
  virtual ~AttentionImpl() = default;

  /// Validates the step's metadata against the cache geometry once and plans the work. The plan
  /// serves every layer of the step with this backend and an equal LayerConfig.
  /// Default: validation only (a backend without a plan of its own).
  virtual std::shared_ptr<const StepPlan> plan(const BatchMetadata& md, const KVCacheSpec& cache) const;
  /// Runs one layer under `plan`: writes args.new_k / new_v first when given, then attends.
  /// q: [num_tokens, num_heads, head_size] → out: [num_tokens, num_heads, head_size_v]; prefill,
  /// chunked prefill and decode sequences may be mixed. Checks are O(1) (the plan holds the
  /// validated metadata).
  virtual RunResult run(const StepPlan& plan, const ForwardArgs& args) const = 0;

  /// One call: plan + run (tests, one-off calls); without args.workspace, on the thread's
  /// KeptScratch (step.hpp).
  void forward(const TensorView& q, const KVCache& cache, const BatchMetadata& md, const TensorView& out) const;
  RunResult forward(const BatchMetadata& md, const ForwardArgs& args) const;
  /// k: [num_tokens, num_kv_heads, head_size], v: [num_tokens, num_kv_heads, head_size_v];
  /// token t goes to md.slot_mapping[t]. Default: KVCache::write.
  virtual void write_kv(const TensorView& k, const TensorView& v, KVCache& cache, const BatchMetadata& md) const;
  /// run()'s write of ForwardArgs::new_k / new_v: `md` is the plan's, validated against the
  /// cache geometry once per step, so the slots are not checked again. Default:
  /// KVCache::write_validated. A backend that writes its own way overrides both.
  virtual void write_planned_kv(const TensorView& k, const TensorView& v, KVCache& cache, const BatchMetadata& md) const;
  /// The kernel variant that runs (e.g. "avx512_bf16"); empty when there is only one.
  virtual std::string variant() const { return {}; }

  const LayerParams& params() const { return params_; }
  const std::string& backend_name() const { return backend_; }

 protected:
  AttentionImpl(std::string backend, LayerParams params, DeviceKind device = DeviceKind::cpu)
      : backend_(std::move(backend)), params_(std::move(params)), device_(device) {}
  /// The per-layer checks of run(): the plan is this layer's (backend and config), the cache has
  /// the planned geometry, q / out match the layer and the step (unless the caller checks them
  /// itself). Then writes new K/V if given.
  void begin_run(const StepPlan& plan, const ForwardArgs& args, bool check_tensors = true) const;
  /// The cache of `args`, checked non-null.
  static const KVCache& cache_of(const ForwardArgs& args);
  /// args.workspace, or `own` grown to `bytes` when the caller gave none.
  static void* scratch(const ForwardArgs& args, Workspace& own, std::size_t bytes);

  std::string backend_;
  LayerParams params_;
  DeviceKind device_;  // the device of the caches (and tensors) run() reads
};

/// Validates the step-level arguments of plan(): the cache geometry against the layer, then the
/// metadata against the cache (O(total blocks), no string work when everything passes).
void check_plan_args(const LayerParams& params, const BatchMetadata& md, const KVCacheSpec& cache);
/// Validates q / out of one run against the layer and the step (O(1)).
void check_run_tensors(const LayerParams& params, const KVCacheSpec& cache, int32_t num_tokens, const TensorView& q,
                       const TensorView& out);

/// Standard ALiBi slopes for `num_heads` heads (Press et al.; non-powers of two interleaved).
std::vector<float> alibi_slopes(int num_heads);

/// When a backend's kv_layout serves only some caches (its kernel computes in some dtypes only):
/// the caches it serves, and the layout every other cache gets.
struct KVLayoutRule {
  std::vector<DType> q_dtypes;        // the layer dtypes it serves; empty: every one
  std::vector<DType> storage_dtypes;  // the cache storage dtypes it serves; empty: every one
  KVLayout otherwise = KVLayout::NHD;  // for other dtypes, and for sizes kv_layout cannot hold (layout_fits_sizes)
  /// The CPU features the kernels that read kv_layout fast need; on a CPU without them the cache
  /// gets `otherwise` (a layout the kernels there stream). Empty: any CPU.
  std::vector<CpuFeature> cpu_features;
};

struct BackendDescriptor {
  std::string name;
  std::string summary;
  Capabilities caps;
  int priority = 100;                 // lower is preferred among valid backends
  /// The correctness oracle: serves every layer, far slower than a production backend; a
  /// decision that lands on it says so in its notes.
  bool oracle = false;
  int preferred_block_size = 16;      // used when the user sets no block size
  KVLayout kv_layout = KVLayout::NHD;
  /// The caches kv_layout is kept for (cache_spec applies it). None: kv_layout for every cache.
  std::optional<KVLayoutRule> kv_layout_rule;
  /// The device whose memory run() reads: the layer's cache, q / out and the workspace
  /// (allocate them with Registry::allocator(device); cpu: plain host memory).
  DeviceKind device = DeviceKind::cpu;
  /// Empty: built into the core. Otherwise the shared module ("attn_cuda") that provides the
  /// factory; loaded on first need, and "module X not loaded: why" is a reason.
  std::string module;
  /// Irregular rules that do not fit Capabilities; appended after the generic reasons.
  std::function<std::vector<Reason>(const LayerConfig&, const Platform&)> extra_checks;
  /// The kernel variant this backend runs for a layer `config` on `platform` (shown in decisions
  /// and `attn plan`: it must equal what the implementation built for that layer reports).
  std::function<std::string(const Platform&, const LayerConfig&)> variant;
  /// The variants LayerParams::variant may name on `platform`, best first. Null: one variant only.
  std::function<std::vector<std::string>(const Platform&)> variants;
  /// Builds the implementation for one layer. Null for module backends until loaded.
  std::function<std::unique_ptr<AttentionImpl>(const LayerParams&)> create;

  /// The cache spec this backend wants for `cfg` with `num_blocks` blocks of `block_size`, read
  /// on `platform` (kv_layout_rule's cpu_features are asked there). Null: this machine as its
  /// kernels run it (the detected CPU, capped at the build ATTN_CPU_ISA forces).
  KVCacheSpec cache_spec(const LayerConfig& cfg, int32_t num_blocks, int32_t block_size,
                         const Platform* platform = nullptr) const;
};

/// {"name":..,"summary":..,"priority":..,"preferred_block_size":..,"kv_layout":..,
///  "kv_layout_rule": null or {"q_dtypes":[..],"storage_dtypes":[..],"otherwise":..,"cpu_features":[..]},
///  "module":..,
///  "variant": its variant on `platform` for a default (bfloat16) LayerConfig, "capabilities": to_json(caps)}
/// as JSON text.
std::string to_json(const BackendDescriptor& backend, const Platform& platform);

}  // namespace attn
