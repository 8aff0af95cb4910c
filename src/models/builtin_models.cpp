// Built-in model names: the config.json files in models/ (ATTN_MODELS_DIR at build time, or the
// ATTN_MODELS_DIR environment variable, so an installed binary can point at a copy).
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "attn/error.hpp"
#include "attn/model.hpp"

#ifndef ATTN_MODELS_DIR
#define ATTN_MODELS_DIR "models"
#endif

namespace attn {
namespace {

namespace fs = std::filesystem;

fs::path models_dir() {
  if (const char* env = std::getenv("ATTN_MODELS_DIR"); env && *env) return env;
  return ATTN_MODELS_DIR;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read model config '" + path.string() + "'");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
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
  throw Error("model='" + name_or_path + "' invalid: expected a config.json path or a built-in model (" +
              join(builtin_models()) + ")");
}

}  // namespace attn
