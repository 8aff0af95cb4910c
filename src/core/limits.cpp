#include "attn/limits.hpp"

#include "attn/checked.hpp"
#include "cpu/threads.hpp"

namespace attn {

int team_size(int requested) { return cpu::team_size(requested); }

int32_t check_threads(std::string_view name, int64_t value) {
  return check_range32(name, value, 0, limits::kMaxThreads, "0 = all cores; at most attn's thread limit");
}

int32_t check_head_size(std::string_view name, int64_t value, int64_t lo) {
  return check_range32(name, value, lo, limits::kMaxHeadSize, "the largest head size attn accepts");
}

int32_t check_heads(std::string_view name, int64_t value) {
  return check_range32(name, value, 1, limits::kMaxHeads, "the most heads attn accepts in one layer");
}

int32_t check_block_size(std::string_view name, int64_t value) {
  return check_range32(name, value, 1, limits::kMaxBlockSize, "tokens per KV-cache block");
}

int32_t check_num_blocks(std::string_view name, int64_t value) {
  return check_range32(name, value, 1, limits::kMaxNumBlocks, "the most blocks attn accepts in one layer's cache");
}

}  // namespace attn
