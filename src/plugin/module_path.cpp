#include "plugin/module_path.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>

namespace attn::detail {
namespace {

std::vector<std::string> module_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("ATTN_MODULE_PATH")) {
    const std::string s = env;
    std::size_t start = 0;
    while (start <= s.size()) {
      std::size_t end = s.find(':', start);
      if (end == std::string::npos) end = s.size();
      if (end > start) dirs.push_back(s.substr(start, end - start));
      start = end + 1;
    }
  }
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&module_dirs), &info) && info.dli_fname)
    dirs.push_back(std::filesystem::path(info.dli_fname).parent_path().string());
  return dirs;
}

}  // namespace

std::vector<std::string> module_candidates(const std::string& module) {
  std::vector<std::string> paths;
  std::error_code ec;
  for (const std::string& dir : module_dirs()) {
    const std::string path = dir + "/lib" + module + ".so";
    if (std::filesystem::exists(path, ec)) paths.push_back(path);
  }
  return paths;
}

}  // namespace attn::detail
