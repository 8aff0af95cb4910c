#pragma once
/// The plan of one forward call: work items over (sequence, query tile, KV head, KV split) and
/// the merges of split items. A plain struct, printable and testable; it depends on each
/// sequence alone (never on the batch or the thread count), which is what makes cpu_flash
/// batch invariant.
#include <cstdint>
#include <string>
#include <vector>

#include "attn/metadata.hpp"
#include "backends/cpu_flash/kernel_args.hpp"

namespace attn::cpu_flash {

struct PlanShape {
  int group = 1;           // q heads per KV head
  int num_kv_heads = 1;
  int head_size_v = 128;
  int window = 0;          // 0 = none
  bool causal = true;
  const int32_t* mm_ranges = nullptr;  // multimodal prefix ranges of the step (use_mm_prefix), or null
};

/// Tiling constants (measured; see bench/ and the README table).
struct Tiling {
  int rows_per_tile = 64;  // query rows (tokens x group heads) per item
  int split_max_rows = 16; // only tiles this small split their KV range (decode-like)
  int split_len = 1024;    // KV positions per split, aligned to absolute positions
};

/// A split tile: `count` partial states, consecutive from float offset `partial0`, merged in order.
struct Merge {
  int32_t seq = 0, kv_head = 0, q_begin = 0, q_end = 0;
  int64_t partial0 = 0;
  int32_t count = 0;
};

struct Plan {
  std::vector<WorkItem> items;   // sorted by descending cost (stable), so big items start first
  std::vector<Merge> merges;
  int64_t partial_floats = 0;    // scratch the split items need
  std::string to_string() const;
};

Plan make_plan(const BatchMetadata& md, const PlanShape& shape, const Tiling& tiling = {});

/// The key range [lo, hi) a tile of query positions [p0, p1] may see.
void visible_keys(int32_t seq_len, int32_t p0, int32_t p1, const PlanShape& shape, int32_t& lo, int32_t& hi);

/// Merges each split tile's partials in their fixed order and writes the rows to out.
void run_merges(const KernelArgs& a, const Plan& plan, const float* partials, int num_threads);

}  // namespace attn::cpu_flash
