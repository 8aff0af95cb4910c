#pragma once
/// The largest values attn accepts, in one place (docs/limits.md lists them for users), and the
/// memory budget whole-model allocations are checked against before anything is allocated.
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace attn::limits {

/// Threads of one kernel call. Far past any machine's cores; the bound exists because a runtime
/// asked for 10^5 threads crashes instead of failing.
inline constexpr int kMaxThreads = 1024;
/// Head size (and head_size_v, MLA dims). The largest finite backend rule is 256 (cpu_flash,
/// cuda_flash); MLA's latent entry is 576 wide (cpu_mla and reference declare "any"); 2048 keeps
/// both with room for wider heads while refusing sizes no kernel could mean.
/// tests/unit/limits_test.cpp checks every registered backend's rule stays within it.
inline constexpr int kMaxHeadSize = 2048;
/// Query or KV heads of one layer.
inline constexpr int kMaxHeads = 4096;
/// Tokens per KV-cache block.
inline constexpr int kMaxBlockSize = 65536;
/// Blocks of one layer's cache: keeps the block allocator's bookkeeping (8 bytes a block) small.
inline constexpr int kMaxNumBlocks = 1 << 24;
/// Layers of one model (the config reader's bound on num_hidden_layers as well).
inline constexpr int kMaxLayers = 4096;
/// Tokens of one sequence, and tokens of one step: positions, seq_lens and query_start_loc are int32.
inline constexpr int64_t kMaxSeqLen = std::numeric_limits<int32_t>::max();
inline constexpr int64_t kMaxTokens = std::numeric_limits<int32_t>::max();
/// The default memory budget: this fraction of the memory available when the budget is read.
inline constexpr double kDefaultMemoryFraction = 0.8;
/// The environment variable that overrides the default budget ("8G", "512M", ...).
inline constexpr const char* kMemoryLimitEnv = "ATTN_MEMORY_LIMIT";

}  // namespace attn::limits

namespace attn {

/// Range checks against the limits above, for every place a caller's number becomes a size:
/// errors name `name`, the value and the accepted range.
int32_t check_threads(std::string_view name, int64_t value);  // 0..kMaxThreads, 0 = all cores
/// The threads a parallel region runs with for a request of `requested`: > 0 as given, 0 the
/// OpenMP default (OMP_NUM_THREADS, else the cores); both clamped to [1, kMaxThreads], since an
/// OpenMP runtime asked for more threads than it can start crashes. The rule of every attn kernel.
int team_size(int requested = 0);
int32_t check_head_size(std::string_view name, int64_t value, int64_t lo = 1);
int32_t check_heads(std::string_view name, int64_t value);
int32_t check_block_size(std::string_view name, int64_t value);
int32_t check_num_blocks(std::string_view name, int64_t value);

struct MemoryBudget {
  uint64_t bytes = 0;
  std::string source;  // "--memory-limit=8G", "ATTN_MEMORY_LIMIT=8G", "80% of available memory (...)"
};

/// Parses "8G", "512M", "1.5G", "64KiB", "4096" (bytes). K, M, G, T are powers of 1024; a trailing
/// "B" or "iB" is allowed. Throws attn::Error naming `name` for anything else, 0 included.
uint64_t parse_byte_size(const std::string& name, const std::string& text);

/// The budget: `override_text` when given (named `override_name` in errors and in `source`),
/// else ATTN_MEMORY_LIMIT when set, else kDefaultMemoryFraction of the memory available now
/// (MemAvailable, capped by the cgroup's memory.max).
MemoryBudget memory_budget(const std::string& override_name = "", const std::string& override_text = "");

/// Throws `Error("<what>=<size> invalid: expected at most <budget> (the memory budget: <source>; <hint>)")`
/// when `bytes` exceeds the budget.
void check_memory(const std::string& what, uint64_t bytes, const MemoryBudget& budget, const std::string& hint);

/// "1.5 GiB", "512.0 MiB", "100 bytes".
std::string format_bytes(uint64_t bytes);

}  // namespace attn
