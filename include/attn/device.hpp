#pragma once
/// Memory on a device: the allocator a device's module provides (host memory is built in), and
/// the owning handle caches and workspaces keep. Allocating a cache is separate from viewing it:
/// a KVCache made with a device's allocator lives on that device, and backends declare which
/// device they read (BackendDescriptor::device).
#include <cstddef>
#include <memory>

#include "attn/tensor.hpp"

namespace attn {

enum class CopyKind : uint8_t { host_to_device, device_to_host, device_to_device };

class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  virtual DeviceKind device() const = 0;
  /// `bytes` bytes of device memory, 256-byte aligned; throws attn::Error when it cannot.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p) noexcept = 0;
  /// Synchronous copy; `kind` says which side is the device.
  virtual void copy(void* dst, const void* src, std::size_t bytes, CopyKind kind) = 0;
  virtual void memset(void* dst, int byte, std::size_t bytes) = 0;
};

/// Host memory (DeviceKind::cpu) through the same interface.
std::shared_ptr<DeviceAllocator> host_allocator();

/// Bytes on one device, released through its allocator. Move-only.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(std::shared_ptr<DeviceAllocator> allocator, std::size_t bytes);
  DeviceMemory(DeviceMemory&& o) noexcept;
  DeviceMemory& operator=(DeviceMemory&& o) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory();

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  explicit operator bool() const { return data_ != nullptr; }
  const std::shared_ptr<DeviceAllocator>& allocator() const { return allocator_; }

 private:
  std::shared_ptr<DeviceAllocator> allocator_;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace attn
