// CudaAllocator: GPU memory for device-resident KVCaches and Workspaces, every call checked.
#include <algorithm>

#include "backends/cuda_flash/cuda_flash.hpp"
#include "backends/cuda_flash/module/cuda_check.hpp"

namespace attn::cuda_flash {

void* CudaAllocator::allocate(std::size_t bytes) {
  void* p = nullptr;
  check_cuda(cudaMalloc(&p, std::max<std::size_t>(bytes, 1)), ("cudaMalloc(" + std::to_string(bytes) + " bytes)").c_str());
  return p;
}

void CudaAllocator::deallocate(void* p) noexcept {
  if (p) cudaFree(p);  // no throwing from a destructor; a failing free leaks at worst
}

void CudaAllocator::copy(void* dst, const void* src, std::size_t bytes, CopyKind kind) {
  if (!bytes) return;
  const cudaMemcpyKind k = kind == CopyKind::host_to_device   ? cudaMemcpyHostToDevice
                           : kind == CopyKind::device_to_host ? cudaMemcpyDeviceToHost
                                                              : cudaMemcpyDeviceToDevice;
  check_cuda(cudaMemcpy(dst, src, bytes, k), "cudaMemcpy");
}

void CudaAllocator::memset(void* dst, int byte, std::size_t bytes) {
  if (bytes) check_cuda(cudaMemset(dst, byte, bytes), "cudaMemset");
}

std::shared_ptr<DeviceAllocator> cuda_allocator() {
  static const std::shared_ptr<DeviceAllocator> gpu = std::make_shared<CudaAllocator>();
  return gpu;
}

}  // namespace attn::cuda_flash
