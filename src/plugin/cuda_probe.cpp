// detect_cuda: asks the attn_cuda module (if it exists and loads) for the first device. The core
// never links CUDA; without the module or a device this reports why. The module is looked up
// where the registry loads it from ($ATTN_MODULE_PATH, then next to libattn).
#include <dlfcn.h>

#include "attn/platform.hpp"
#include "plugin/module_path.hpp"

namespace attn {

extern "C" typedef int (*attn_cuda_device_info_fn)(char* name, int name_len, int* major, int* minor, char* why, int why_len);

bool detect_cuda(Platform& out, std::string& why) {
  void* h = nullptr;
  std::string last_why = "libattn_cuda.so not found";
  for (const std::string& path : detail::module_candidates("attn_cuda")) {
    h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h) break;
    const char* e = dlerror();
    last_why = e ? e : path;
  }
  if (!h) {
    why = "module attn_cuda not loaded: " + last_why;
    return false;
  }
  auto fn = reinterpret_cast<attn_cuda_device_info_fn>(dlsym(h, "attn_cuda_device_info"));
  if (!fn) {
    why = "module attn_cuda does not export attn_cuda_device_info";
    return false;
  }
  char name[256] = {}, reason[512] = {};
  int major = 0, minor = 0;
  if (!fn(name, sizeof name, &major, &minor, reason, sizeof reason)) {
    why = reason;
    return false;
  }
  out = Platform{};
  out.kind = PlatformKind::cuda;
  out.name = name;
  out.cc = {major, minor};
  out.detected = true;
  return true;
}

}  // namespace attn
