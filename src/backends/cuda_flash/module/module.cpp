// libattn_cuda.so's entry points: the registry ABI (attn_abi_version, attn_register) and a
// device probe the core may use for `--platform cuda`. With no driver or no device,
// attn_register throws, and the registry turns the message into "module attn_cuda not loaded:
// no CUDA device: <cudaGetErrorString>" — a reason in every decision, never a crash.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "attn/error.hpp"
#include "attn/registry.hpp"
#include "backends/cuda_flash/cuda_flash.hpp"

namespace {

// Returns "" when a device is usable, else why not.
std::string probe_device(cudaDeviceProp* prop) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorString(e);
  if (count == 0) return "no CUDA device: cudaGetDeviceCount found 0 devices";
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) device = 0;
  const cudaError_t pe = cudaGetDeviceProperties(prop, device);
  if (pe != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorString(pe);
  return {};
}

void copy_text(const std::string& s, char* dst, int cap) {
  if (dst && cap > 0) std::snprintf(dst, std::size_t(cap), "%s", s.c_str());
}

}  // namespace

extern "C" {

int attn_abi_version() { return ATTN_ABI_VERSION; }

void attn_register(attn::Registry& registry) {
  cudaDeviceProp prop{};
  const std::string why = probe_device(&prop);
  if (!why.empty()) throw attn::Error(why);
  registry.provide_allocator(attn::DeviceKind::cuda, attn::cuda_flash::cuda_allocator());
  registry.provide("cuda_flash", [](const attn::LayerParams& params) -> std::unique_ptr<attn::AttentionImpl> {
    return std::make_unique<attn::cuda_flash::CudaFlashAttention>(params);
  });
}

/// The current CUDA device: returns 1 and fills name / compute capability, or returns 0 and
/// writes why into `why`. For the core's detect_cuda (dlsym), so the core never links CUDA.
int attn_cuda_device_info(char* name, int name_cap, int* major, int* minor, char* why, int why_cap) {
  cudaDeviceProp prop{};
  const std::string reason = probe_device(&prop);
  if (!reason.empty()) {
    copy_text(reason, why, why_cap);
    return 0;
  }
  copy_text(prop.name, name, name_cap);
  if (major) *major = prop.major;
  if (minor) *minor = prop.minor;
  return 1;
}

}  // extern "C"
