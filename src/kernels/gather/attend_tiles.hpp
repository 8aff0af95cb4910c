#pragma once
/// The parallel driver shared by the MLA (dense / top-k) and block-sparse kernels: each tile is a
/// group of query rows against one key list; tiles are split over keys when there are too few of
/// them to keep every thread busy, and the splits are merged by log-sum-exp. The tiles, their key
/// lists and the splits are planned once per step (TilePlan, held by the step plan); a run takes
/// its q rows and partials from the caller's workspace and allocates nothing once warm.
#include <cstdint>
#include <vector>

#include "attn/kv_cache.hpp"
#include "attn/tensor.hpp"

namespace attn::mla {

struct Tile {
  int64_t q_offset = 0;         // floats into the run's q: the tile's [rows][width] start there
  int rows = 0;
  int64_t slots_offset = 0;     // into TilePlan::slots: the key list, cache slots in position order
  int num_keys = 0;             // keys in the list (top-k: the planned capacity; the run counts them)
  int64_t visible_offset = -1;  // into TilePlan::visible: row r sees its first visible[r] keys; -1: all
  int kv_head = -1;             // separate-V caches (block-sparse): the tile's KV head, whose K / V
                                // rows and scales it reads; -1: the MLA entry (V in K, one scale)
  int64_t out_index = 0;        // where its outputs go: first token << 20 | head block (of
                                // TileRun::row_heads q heads); row r is token + r / row_heads
};

struct TilePlan {
  std::vector<Tile> tiles;
  std::vector<int64_t> slots;    // the planned key lists (empty: the run lists them, top-k)
  std::vector<int32_t> visible;  // the tiles' per-row key counts (visible_offset)
  std::vector<int> num_splits;   // per tile: key splits (1: whole)
  std::vector<int> first_part;   // per tile: its first partial (-1: not split)
  std::vector<int64_t> part_offset;  // per partial: floats into the partials
  int64_t part_floats = 0;
  int max_rows = 0;              // the largest tile's rows (each thread's scratch is grown to it)
  struct Task {
    int tile = 0, split = 0;
  };
  std::vector<Task> tasks;

  /// Splits the tiles over keys when there are fewer than 2 per thread (sets everything above
  /// from `tiles`); `rank` is the output width the partial states hold.
  void plan_tasks(int threads, int rank);
  /// Bytes of a run's own buffers (partials and per-tile counters), a multiple of 64.
  std::size_t run_bytes() const;
};

struct TileRun {
  const PagedKV* kv = nullptr;
  int width = 0, rank = 0;
  const float* k_scales = nullptr;     // per KV head (Tile::kv_head; the MLA entry: [0]); null: 1
  const float* v_scales = nullptr;
  float q_mul = 0.0f;                  // the tiles' q = input q * q_mul, when known (AttendArgs)
  int num_threads = 0;                 // 0 → OpenMP default
  const float* q = nullptr;            // the q rows Tile::q_offset points into
  const int64_t* slots = nullptr;      // the key lists Tile::slots_offset points into
  // A run that lists the keys itself (top-k): tile i's list at slots + i * list_stride, its length
  // num_keys[i] (else Tile::slots_offset and Tile::num_keys).
  const int32_t* num_keys = nullptr;
  int64_t list_stride = 0;
  void* buffers = nullptr;             // TilePlan::run_bytes() of workspace
  const TensorView* out = nullptr;     // [tokens, heads, rank]: where the rows' outputs go
  int row_heads = 1;                   // q heads per token in a tile's rows (see Tile::out_index)
};

/// Where row r of `tile` writes its `rank` outputs.
inline void* out_row(const TileRun& run, const Tile& tile, int r) {
  const int64_t tok = (tile.out_index >> 20) + r / run.row_heads;
  const int64_t head = (tile.out_index & ((int64_t(1) << 20) - 1)) * run.row_heads + r % run.row_heads;
  return static_cast<uint8_t*>(run.out->data) + (tok * run.out->strides[0] + head * run.out->strides[1]) * dtype_size(run.out->dtype);
}

void run_tiles(const TileRun& run, const TilePlan& plan);

/// Bump allocation of one run's buffers from a workspace: each carve is 64-byte aligned.
struct WorkspaceCarver {
  char* next = nullptr;
  static constexpr std::size_t round(std::size_t bytes) { return (bytes + 63) / 64 * 64; }
  template <typename T>
  T* take(std::size_t count) {
    T* p = reinterpret_cast<T*>(next);
    next += round(count * sizeof(T));
    return p;
  }
};

}  // namespace attn::mla
