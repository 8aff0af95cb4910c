#pragma once
/// cuda_flash's C++ API, for callers that keep the KV cache and activations on the GPU. Link the
/// module target `attn_cuda` (libattn_cuda.so) to use it; the core only ever dlopens the module.
///
/// Two ways in:
///  - Through the registry, like every backend: `Registry::instance().create("cuda_flash", params)`
///    returns an AttentionImpl whose write_kv / forward take the core's host `KVCache` and host or
///    device q / out. The host cache is uploaded on every forward: correct everywhere, made for
///    tests, `attn check` and small runs, not for serving.
///  - On the device: allocate a `CudaKVCache` (same spec, layout and strides as the core's
///    `KVCache`), then call `CudaFlashAttention::write_kv(k, v, gpu_cache, md)` and
///    `forward(q, gpu_cache, md, out)` with tensors whose `device` is DeviceKind::cuda. Nothing
///    is copied but the step's metadata (once per distinct BatchMetadata). Work is queued on the
///    legacy default stream; call `synchronize()` before reading results on the host.
///
/// Device tensors: f16 / bf16, last dimension contiguous, data 16-byte aligned and row strides
/// multiples of 8 elements (the kernels move 16-byte chunks).
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "attn/backend.hpp"
#include "attn/kv_cache.hpp"

namespace attn::cuda_flash {

/// Device memory from cudaMalloc, released on destruction. Grows, never shrinks.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) { reserve(bytes); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_) { o.data_ = nullptr; o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();
  /// Makes room for `bytes` (contents are lost when it reallocates).
  void reserve(std::size_t bytes);
  void* data() const { return data_; }
  template <typename T> T* as() const { return static_cast<T*>(data_); }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

/// One layer's paged KV cache in GPU memory: the byte layout of attn::KVCache with the same spec
/// (NHD or HND), so a host cache uploads 1:1. Scales live on the device too.
class CudaKVCache {
 public:
  explicit CudaKVCache(const KVCacheSpec& spec);
  const KVCacheSpec& spec() const { return spec_; }
  /// Strides as KVCache::view(); `base`, `k_scales` and `v_scales` are device pointers.
  PagedKV view() const;
  std::size_t bytes() const { return bytes_; }
  void* data() const { return storage_.data(); }

  /// Quantization scales, as KVCache::set_scales (one value per tensor or one per KV head).
  void set_scales(const std::vector<float>& k_scales, const std::vector<float>& v_scales);
  const std::vector<float>& k_scales() const { return k_scales_; }
  const std::vector<float>& v_scales() const { return v_scales_; }

  /// Copies a host cache of the same spec (bytes and scales) to the device, and back.
  void upload(const KVCache& host);
  void download(KVCache& host) const;
  /// Fills every byte with `byte` (0xFF poisons 16-bit caches with NaN; tests).
  void fill_bytes(int byte);

 private:
  KVCacheSpec spec_;
  std::size_t bytes_ = 0;
  DeviceBuffer storage_;
  DeviceBuffer scales_;  // [2, num_kv_heads]: k then v
  std::vector<float> k_scales_, v_scales_;
};

/// The cuda_flash implementation of one layer.
class CudaFlashAttention final : public AttentionImpl {
 public:
  explicit CudaFlashAttention(const LayerParams& params);
  ~CudaFlashAttention() override;

  /// Device path: k, v [num_tokens, num_kv_heads, head_size] on the GPU (f32 / f16 / bf16).
  void write_kv(const TensorView& k, const TensorView& v, CudaKVCache& cache, const BatchMetadata& md);
  /// Device path: q [num_tokens, num_heads, head_size] → out (same shape and dtype), on the GPU.
  void forward(const TensorView& q, const CudaKVCache& cache, const BatchMetadata& md, const TensorView& out);

  /// Host-cache path (the AttentionImpl interface): see the file comment. Runs of one layer
  /// object are serialized (the host path keeps a device mirror and staging per layer).
  using AttentionImpl::forward;
  void write_kv(const TensorView& k, const TensorView& v, KVCache& cache, const BatchMetadata& md) const override;
  RunResult run(const StepPlan& plan, const ForwardArgs& args) const override;
  std::string variant() const override;

  /// Waits for the queued work and reports any asynchronous kernel error as attn::Error.
  void synchronize() const;
  /// Splits the last forward used for its decode sequences (tests, benchmarks).
  int last_decode_splits() const { return last_decode_splits_; }

 private:
  struct Plan;
  void upload_metadata(const BatchMetadata& md);
  void forward_host(const TensorView& q, const KVCache& cache, const BatchMetadata& md, const TensorView& out);

  std::mutex host_path_;
  int sm_count_ = 1;
  std::string variant_;
  DeviceBuffer sinks_;
  DeviceBuffer metadata_;        // packed int32 arrays of the current step
  std::vector<int32_t> packed_;  // host copy of what metadata_ holds
  std::unique_ptr<Plan> plan_;
  DeviceBuffer partial_o_, partial_lse_;
  DeviceBuffer slots_;
  // Host-cache path: a device mirror of the cache and staging for host q / out.
  std::unique_ptr<CudaKVCache> mirror_;
  DeviceBuffer stage_q_, stage_out_;
  int last_decode_splits_ = 0;
};

}  // namespace attn::cuda_flash
