#pragma once
/// The parallel driver shared by the MLA (dense / top-k) and block-sparse kernels: each tile is a
/// group of query rows against one key list; tiles are split over keys when there are too few of
/// them to keep every thread busy, and the splits are merged by log-sum-exp.
#include <cstdint>
#include <functional>
#include <vector>

#include "attn/kv_cache.hpp"

namespace attn::mla {

struct Tile {
  const float* q = nullptr;            // [rows][width], pre-scaled by scale * log2(e)
  int rows = 0;
  const int64_t* slots = nullptr;      // key list: cache slots in position order
  int num_keys = 0;
  std::vector<int32_t> visible;        // [rows]: row r sees the first visible[r] keys
  int64_t k_offset = 0, v_offset = -1; // see AttendArgs
  int64_t out_index = 0;               // handed back to out_row to locate the outputs
};

struct TileRun {
  const PagedKV* kv = nullptr;
  int width = 0, rank = 0;
  float k_scale = 1.0f, v_scale = 1.0f;
  float q_mul = 0.0f;                  // the tiles' q = input q * q_mul, when known (AttendArgs)
  int num_threads = 0;                 // 0 → OpenMP default
  DType out_dtype = DType::float32;
  /// Where row r of the tile with out_index i writes its `rank` outputs.
  std::function<void*(int64_t out_index, int row)> out_row;
};

void run_tiles(const TileRun& run, const std::vector<Tile>& tiles);

}  // namespace attn::mla
