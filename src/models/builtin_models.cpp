// Built-in model names: the config.json files in models/, found at run time relative to libattn
// (nothing absolute is compiled in, so a moved build or installed tree still finds them):
//   $ATTN_MODELS_DIR, else <dir of libattn>/models (a build tree, the Python wheel), else
//   <dir of libattn>/../share/attn/models (an installed <prefix>/lib*/libattn.so).
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "attn/error.hpp"
#include "attn/model.hpp"
#include "models/config_json.hpp"

namespace attn {
namespace {

namespace fs = std::filesystem;

fs::path models_dir() {
  if (const char* env = std::getenv("ATTN_MODELS_DIR"); env && *env) return env;
  Dl_info info;
  if (!dladdr(reinterpret_cast<void*>(&models_dir), &info) || !info.dli_fname) return "models";
  const fs::path lib_dir = fs::path(info.dli_fname).parent_path();
  std::error_code ec;
  if (fs::is_directory(lib_dir / "models", ec)) return lib_dir / "models";
  return lib_dir.parent_path() / "share" / "attn" / "models";
}

/// The file's text, through the one bounded reader: a config path may name any file, and a
/// huge one, a FIFO or a device must fail before the parser ever sees it.
std::string read_text(const fs::path& path) {
  return json_file::read(path.string(), "model config '" + path.string() + "'", models::kMaxConfigBytes);
}

}  // namespace

std::vector<std::string> builtin_models() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(models_dir(), ec)) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string default_model() { return "llama-3.1-8b"; }

ModelSpec load_model(const std::string& name_or_path, const ModelOverrides& overrides) {
  if (name_or_path.empty()) throw Error("model='' invalid: expected a built-in name or a config.json path");
  fs::path path(name_or_path);
  std::error_code ec;
  if (fs::is_directory(path, ec)) path /= "config.json";
  if (fs::is_regular_file(path, ec)) return parse_model_config(read_text(path), name_or_path, overrides);

  fs::path builtin = models_dir() / (name_or_path + ".json");
  if (name_or_path.find('/') == std::string::npos && fs::is_regular_file(builtin, ec)) {
    return parse_model_config(read_text(builtin), name_or_path, overrides);
  }
  const std::vector<std::string> names = builtin_models();
  const std::string dir = models_dir().string();
  const std::string known = names.empty() ? "none in " + dir + "; set ATTN_MODELS_DIR" : join(names);
  throw Error("model='" + name_or_path + "' invalid: expected a config.json path or a built-in model (" + known + ")");
}

}  // namespace attn
