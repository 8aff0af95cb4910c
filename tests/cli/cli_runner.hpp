#pragma once
// Running the `attn` binary from tests: exit code, stdout and stderr of one invocation, and
// small model configs written to disk for it.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace attn::cli_test {

namespace fs = std::filesystem;

struct CliResult {
  int rc = -1;
  std::string out, err;
};

inline std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// Runs `attn <args>` (arguments are trusted test literals), capturing stdout and stderr;
/// `env` ("NAME=value ...") is set for that one process (after the defaults: quiet log, no
/// tuning file, so the user's own tuning never changes a test's decisions).
inline CliResult attn_cli(const std::string& args, const std::string& env = "") {
  static int counter = 0;
  const fs::path err_file = fs::temp_directory_path() / ("attn_cli_test_" + std::to_string(::getpid()) + "_" +
                                                         std::to_string(counter++) + ".err");
  const std::string cmd = "ATTN_LOG=error ATTN_TUNE_FILE=off " + env + " '" + std::string(ATTN_CLI_PATH) + "' " + args + " 2>'" + err_file.string() + "'";
  CliResult r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  const int status = ::pclose(pipe);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = read_all(err_file);
  fs::remove(err_file);
  return r;
}

/// A small decoder config on disk, so `attn run` finishes in well under a second.
inline fs::path tiny_model(const std::string& name, const nlohmann::json& cfg) {
  const fs::path p = fs::temp_directory_path() / ("attn_cli_" + std::to_string(::getpid()) + "_" + name + ".json");
  std::ofstream(p) << cfg.dump();
  return p;
}

inline nlohmann::json tiny_llama() {
  return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", 256},
          {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"num_hidden_layers", 3}, {"torch_dtype", "bfloat16"}};
}

}  // namespace attn::cli_test
