#pragma once
// The `attn` subcommands. Each returns the process exit code; errors (attn::Error) propagate to
// main, which prints them on stderr and exits 1.
#include <cstdint>
#include <optional>
#include <string>

namespace CLI {
class App;
}

namespace attn_cli {

struct BackendsOptions {
  std::string platform;  // "" = this machine
  bool json = false;
};

/// Flags shared by `plan` and `run`: which model, and how the user overrides its precision.
struct ModelOptions {
  std::string model;          // built-in name or config.json path
  std::string platform;       // "" = this machine
  std::string dtype;          // "" = the config's torch_dtype
  std::string kv_cache_dtype; // "" = auto
  std::optional<int64_t> block_size;  // unset = the chosen backend's preferred size
  std::string backend;        // forced attention backend ("" / "auto" = none)
  int64_t tensor_parallel = 1;  // ranks that split every layer's heads
};

struct PlanOptions {
  ModelOptions model;
  int64_t pipeline_parallel = 1;  // stages holding contiguous layer ranges
  bool json = false;
};

/// Sizes are int64 so that any number the user types reaches the limit checks (options.hpp)
/// and is refused there by name, rather than wrapping in the parser or in arithmetic.
struct RunOptions {
  ModelOptions model;
  int64_t batch = 4;
  int64_t prompt_len = 128;
  int64_t decode_steps = 16;
  int64_t threads = 0;        // 0 = all cores
  uint64_t seed = 1;
  std::string memory_limit;   // "" = ATTN_MEMORY_LIMIT, else a fraction of available memory
  int64_t rank = 0;           // the tensor-parallel rank whose share runs
  bool json = false;
};

struct CheckOptions {
  std::string backend;        // "" = every registered backend
  uint64_t seed = 1;
  bool json = false;
};

struct TuneOptions {
  ModelOptions model;
  std::string model_arg;      // the positional form of --model
  double budget = 20;         // seconds of timing
  int64_t threads = 0;        // 0 = all cores
  int64_t decode_batch = 4, decode_context = 1024, prefill_len = 256;
  std::string output;         // "" = the tuning file the selector reads
  bool json = false;
};
/// `attn tune`'s own flags (the model flags are shared with plan and run).
void add_tune_flags(CLI::App* cmd, TuneOptions& options);

int cmd_backends(const BackendsOptions& options);
int cmd_plan(const PlanOptions& options);
int cmd_run(const RunOptions& options);
int cmd_check(const CheckOptions& options);
int cmd_tune(const TuneOptions& options);

}  // namespace attn_cli
