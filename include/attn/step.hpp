#pragma once
/// The per-step execution interface: plan once per engine step, run once per layer.
///
///   auto plan = impl->plan(md, cache.spec());          // validates md once, plans the work
///   Workspace ws(plan->workspace_bytes());             // caller-owned, reused across layers
///   for (layer : layers) layer.impl->run(*plan, {.q = ..., .out = ..., .cache = &layer.cache, .workspace = &ws});
///
/// A plan depends on the step's metadata and the layer group's configuration, never on weights or
/// data, so one plan serves every layer that shares a backend and a configuration. run() is const
/// and keeps no state: several threads may run different layers at once (one Workspace each).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "attn/device.hpp"
#include "attn/kv_cache.hpp"
#include "attn/layer_config.hpp"
#include "attn/metadata.hpp"
#include "attn/tensor.hpp"

namespace attn {

/// Scratch memory a run needs, owned by the caller and sized by the plan. It grows when a plan
/// asks for more and never shrinks, so a steady-state step allocates nothing. Host memory, or
/// the memory of the device a backend runs on (its descriptor's `device`).
class Workspace {
 public:
  Workspace() = default;
  explicit Workspace(std::size_t bytes) { reserve(bytes); }
  /// A workspace in `allocator`'s memory (e.g. Registry::allocator(DeviceKind::cuda)).
  explicit Workspace(std::shared_ptr<DeviceAllocator> allocator) : allocator_(std::move(allocator)) {}
  /// Ensures at least `bytes` bytes (64-byte aligned); allocates only when growing.
  void reserve(std::size_t bytes);
  void* data() const { return allocator_ ? device_.data() : buffer_.data(); }
  std::size_t bytes() const { return allocator_ ? device_.bytes() : buffer_.bytes(); }
  DeviceKind device() const { return allocator_ ? allocator_->device() : DeviceKind::cpu; }

 private:
  Buffer buffer_;
  std::shared_ptr<DeviceAllocator> allocator_;
  DeviceMemory device_;
};

/// The calling thread's kept host scratch for one-call runs (forward without a Workspace), leased
/// for this object's lifetime: a loop of one-off calls then neither maps nor zeroes scratch per
/// call. get() is null (the run allocates its own, as before) for device memory, for more than
/// 64 MiB (one huge prefill does not pin its scratch), and while the thread's scratch is leased
/// already (a one-call run nested in another on the same thread).
class KeptScratch {
 public:
  KeptScratch(DeviceKind device, std::size_t bytes);
  ~KeptScratch();
  KeptScratch(const KeptScratch&) = delete;
  KeptScratch& operator=(const KeptScratch&) = delete;
  Workspace* get() const { return ws_; }

 private:
  Workspace* ws_ = nullptr;
};

/// The form an MLA layer runs in; q and out are shaped for it. StepPlan::preferred_mla_form says
/// which needs fewer FLOPs for the step (expanded needs the layer's up-projections).
enum class MlaForm : uint8_t { absorbed, expanded };
inline constexpr MlaForm kLastMlaForm = MlaForm::expanded;  // the name table is checked against it
std::string_view to_string(MlaForm f);
MlaForm parse_mla_form(std::string_view name);  // "absorbed" / "expanded"

/// Everything one layer's run reads and writes. Views only: nothing is copied or kept.
struct ForwardArgs {
  TensorView q;                  // [num_tokens, num_heads, head_size]
  TensorView out;                // [num_tokens, num_heads, head_size_v]
  KVCache* cache = nullptr;      // the layer's cache; written only when new_k / new_v are given
  TensorView new_k, new_v;       // optional: this step's K / V, written at slot_mapping before attending
  TensorView topk_indices;       // top-k sparse layers: [num_tokens, topk] int32 (-1 = padding)
  MlaForm mla_form = MlaForm::absorbed;
  Workspace* workspace = nullptr;  // null: run() allocates its own scratch; forward() uses KeptScratch
};

/// What ran, returned rather than stored (so a layer object holds no per-call state).
struct RunResult {
  std::string_view variant;  // the kernel variant, e.g. "avx512_bf16"
  std::string_view form;     // MLA: "absorbed" / "expanded"; else empty
};

/// A backend's plan of one step for one layer group. Immutable once built; printable.
class StepPlan {
 public:
  StepPlan(std::string backend, const LayerConfig& config, BatchMetadata md, const KVCacheSpec& cache)
      : backend_(std::move(backend)), config_(config), md_(std::move(md)), cache_(cache) {}
  virtual ~StepPlan() = default;

  const std::string& backend() const { return backend_; }
  const LayerConfig& config() const { return config_; }
  const BatchMetadata& metadata() const { return md_; }
  /// The cache geometry the metadata was validated against (every layer's cache must match it).
  const KVCacheSpec& cache_spec() const { return cache_; }
  /// Scratch bytes a run of this plan needs (Workspace::reserve).
  virtual std::size_t workspace_bytes() const { return 0; }
  /// MLA: the form that needs fewer FLOPs for this step (absorbed for every other layer).
  virtual MlaForm preferred_mla_form() const { return MlaForm::absorbed; }
  virtual std::string to_string() const;

 private:
  std::string backend_;
  LayerConfig config_;
  BatchMetadata md_;
  KVCacheSpec cache_;
};

}  // namespace attn
