#pragma once
/// cuda_flash's C++ side, inside the module libattn_cuda.so (the core only ever dlopens it).
///
/// Served like every backend, through the registry and plan / run, with everything on the GPU:
///
///   auto gpu = Registry::instance().allocator(DeviceKind::cuda);   // loads the module
///   KVCache cache(spec, gpu);                                       // device-resident, zeroed
///   auto impl = Registry::instance().create("cuda_flash", params);
///   auto plan = impl->plan(md, cache.spec());     // validates md, uploads it once, sizes the grid
///   Workspace ws(gpu);                            // split-KV partials, reused across layers
///   impl->run(*plan, {.q = dq, .out = dout, .cache = &cache, .new_k = dk, .new_v = dv, .workspace = &ws});
///
/// Nothing is copied per layer: the plan holds the step's metadata (and slot mapping) on the
/// device. Work is queued on the legacy default stream; CudaFlashAttention::synchronize() (or any
/// blocking copy) before reading results on the host.
///
/// Device tensors: q / out f16 / bf16 with `device` = DeviceKind::cuda, last dimension
/// contiguous, q 16-byte aligned with row strides multiples of 8 elements (16-byte loads).
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "attn/backend.hpp"
#include "attn/device.hpp"
#include "attn/kv_cache.hpp"

namespace attn::cuda_flash {

/// GPU memory through cudaMalloc / cudaMemcpy: what the module provides as the cuda allocator.
class CudaAllocator final : public DeviceAllocator {
 public:
  DeviceKind device() const override { return DeviceKind::cuda; }
  void* allocate(std::size_t bytes) override;
  void deallocate(void* p) noexcept override;
  void copy(void* dst, const void* src, std::size_t bytes, CopyKind kind) override;
  void memset(void* dst, int byte, std::size_t bytes) override;
};
/// The module's allocator (one per process).
std::shared_ptr<DeviceAllocator> cuda_allocator();

/// The cuda_flash implementation of one layer. run() is const and keeps no state: several
/// threads may run different layers under one plan (one device Workspace each).
class CudaFlashAttention final : public AttentionImpl {
 public:
  explicit CudaFlashAttention(const LayerParams& params);
  ~CudaFlashAttention() override;

  /// Validates the step's metadata against the cache geometry, chooses which sequences decode
  /// and how many KV splits they take, and uploads the packed metadata once (a CudaStepPlan).
  std::shared_ptr<const StepPlan> plan(const BatchMetadata& md, const KVCacheSpec& cache) const override;
  RunResult run(const StepPlan& plan, const ForwardArgs& args) const override;
  /// k, v [num_tokens, num_kv_heads, head_size] on the GPU (f32 / f16 / bf16) into a device
  /// cache; host k / v into a host cache (filled on the host, then KVCache::copy_from to the GPU).
  void write_kv(const TensorView& k, const TensorView& v, KVCache& cache, const BatchMetadata& md) const override;
  std::string variant() const override;

  /// Waits for the queued work and reports any asynchronous kernel error as attn::Error.
  void synchronize() const;

 private:
  int sm_count_ = 1;
  std::string variant_;
  DeviceMemory sinks_;
};

/// cuda_flash's plan of one step: the launch lists and split-KV choice, with the packed
/// metadata already on the device.
class CudaStepPlan final : public StepPlan {
 public:
  using StepPlan::StepPlan;
  std::size_t workspace_bytes() const override;
  std::string to_string() const override;

  int decode_count = 0, prefill_count = 0;
  int max_prefill_rows = 0;
  int decode_splits = 1, split_tokens = 0;
  int heads = 0, head_size = 0;
  // Offsets (in int32 elements) of each packed array in `device_metadata`; slot_mapping is int64.
  std::size_t off_qsl = 0, off_seq_lens = 0, off_table = 0, off_token_seq = 0, off_splits = 0, off_decode = 0,
              off_prefill = 0;
  DeviceMemory device_metadata;  // packed int32 arrays
  DeviceMemory slot_mapping;  // int64 [num_tokens], for run's write of new K/V
};

}  // namespace attn::cuda_flash
