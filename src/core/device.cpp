#include "attn/device.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "attn/error.hpp"

namespace attn {

namespace {

class HostAllocator final : public DeviceAllocator {
 public:
  DeviceKind device() const override { return DeviceKind::cpu; }
  void* allocate(std::size_t bytes) override {
    void* p = std::aligned_alloc(256, (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256);
    if (!p) throw Error("host allocation of " + std::to_string(bytes) + " bytes failed");
    return p;
  }
  void deallocate(void* p) noexcept override { std::free(p); }
  void copy(void* dst, const void* src, std::size_t bytes, CopyKind) override {
    if (bytes) std::memmove(dst, src, bytes);
  }
  void memset(void* dst, int byte, std::size_t bytes) override {
    if (bytes) std::memset(dst, byte, bytes);
  }
};

}  // namespace

std::shared_ptr<DeviceAllocator> host_allocator() {
  static const std::shared_ptr<DeviceAllocator> host = std::make_shared<HostAllocator>();
  return host;
}

DeviceMemory::DeviceMemory(std::shared_ptr<DeviceAllocator> allocator, std::size_t bytes)
    : allocator_(std::move(allocator)), bytes_(bytes) {
  require(allocator_ != nullptr, "allocator", "null", "a device allocator");
  data_ = allocator_->allocate(bytes);
}

DeviceMemory::DeviceMemory(DeviceMemory&& o) noexcept
    : allocator_(std::move(o.allocator_)), data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& o) noexcept {
  if (this != &o) {
    if (data_) allocator_->deallocate(data_);
    allocator_ = std::move(o.allocator_);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

DeviceMemory::~DeviceMemory() {
  if (data_) allocator_->deallocate(data_);
}

}  // namespace attn
