// detect_cuda: asks the attn_cuda module (if it exists and loads) for the first device. The core
// never links CUDA; without the module or a device this reports why.
#include <dlfcn.h>

#include <filesystem>

#include "attn/platform.hpp"

namespace attn {

extern "C" typedef int (*attn_cuda_device_info_fn)(char* name, int name_len, int* major, int* minor, char* why, int why_len);

bool detect_cuda(Platform& out, std::string& why) {
  Dl_info info;
  std::string dir;
  if (dladdr(reinterpret_cast<void*>(&detect_cuda), &info) && info.dli_fname)
    dir = std::filesystem::path(info.dli_fname).parent_path().string();
  const std::string path = (dir.empty() ? std::string() : dir + "/") + "libattn_cuda.so";
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    why = std::string("module attn_cuda not loaded: ") + (e ? e : path);
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
