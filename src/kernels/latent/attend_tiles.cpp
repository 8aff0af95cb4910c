#include "kernels/latent/attend_tiles.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>

#include "kernels/latent/mla_forward.hpp"
#include "kernels/latent/mla_kernel.hpp"
#include "cpu/threads.hpp"

namespace attn::mla {
namespace {

// A split needs enough keys to amortize its partial state and the merge.
constexpr int kMinKeysPerSplit = 256;

struct Task {
  int tile = 0, key0 = 0, key1 = 0;
  int part = -1;  // >= 0: a split whose partial state is merged afterwards
};

}  // namespace

void run_tiles(const TileRun& run, const std::vector<Tile>& tiles) {
  if (tiles.empty()) return;
  const int threads = cpu::team_size(run.num_threads);
  const int R = run.rank;

  std::vector<Task> tasks;
  std::vector<int> first_part(tiles.size(), -1), num_splits(tiles.size(), 1);
  std::vector<size_t> part_offset;  // into `parts`, per partial
  size_t parts_size = 0;
  const int want = 2 * threads;
  for (size_t ti = 0; ti < tiles.size(); ++ti) {
    const Tile& t = tiles[ti];
    int splits = 1;
    if (int(tiles.size()) < want) {
      const int per_tile = (want + int(tiles.size()) - 1) / int(tiles.size());
      splits = std::max(1, std::min(per_tile, t.num_keys / kMinKeysPerSplit));
    }
    num_splits[ti] = splits;
    const int per = (t.num_keys + splits - 1) / splits;
    if (splits > 1) first_part[ti] = int(part_offset.size());
    for (int k = 0; k < splits; ++k) {
      Task task{int(ti), std::min(t.num_keys, k * per), std::min(t.num_keys, (k + 1) * per), -1};
      if (splits > 1) {
        task.part = int(part_offset.size());
        part_offset.push_back(parts_size);
        parts_size += size_t(t.rows) * (R + 2);
      }
      tasks.push_back(task);
    }
  }
  std::vector<float> parts(parts_size);
  const AttendFn attend = best_attend();

  // The last split of a tile to finish merges it (log-sum-exp), so a split call still forks and
  // joins once: on a loaded machine each extra join waits for a descheduled thread.
  std::vector<std::atomic<int>> pending(tiles.size());
  for (size_t ti = 0; ti < tiles.size(); ++ti) pending[ti].store(num_splits[ti], std::memory_order_relaxed);
  auto merge = [&](int ti) {
    const int rows = tiles[ti].rows;
    thread_local std::vector<float> merged;
    merged.resize(R);
    for (int r = 0; r < rows; ++r) {
      float M = -INFINITY;
      for (int p = 0; p < num_splits[ti]; ++p) M = std::max(M, parts[part_offset[first_part[ti] + p] + r]);
      float L = 0.0f;
      std::fill(merged.begin(), merged.end(), 0.0f);
      for (int p = 0; p < num_splits[ti] && M != -INFINITY; ++p) {
        const float* base = parts.data() + part_offset[first_part[ti] + p];
        if (base[r] == -INFINITY) continue;
        const float w = std::exp2(base[r] - M);
        L += base[rows + r] * w;
        const float* acc = base + 2 * rows + size_t(r) * R;
        for (int d = 0; d < R; ++d) merged[d] += acc[d] * w;
      }
      write_row(run.out_row(tiles[ti].out_index, r), run.out_dtype, merged.data(), R, L == 0.0f ? 0.0f : 1.0f / L);
    }
  };

#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Task& task = tasks[i];
    const Tile& tile = tiles[task.tile];
    const int rows = tile.rows;
    thread_local std::vector<float> own;
    thread_local std::vector<int32_t> limits;
    float* state;
    if (task.part >= 0) {
      state = parts.data() + part_offset[task.part];
    } else {
      own.resize(size_t(rows) * (R + 2));
      state = own.data();
    }
    float* m = state;
    float* l = m + rows;
    float* acc = l + rows;
    std::fill(m, m + rows, -INFINITY);
    std::fill(l, l + rows + size_t(rows) * R, 0.0f);
    limits.resize(rows);
    for (int r = 0; r < rows; ++r) limits[r] = std::clamp(tile.visible[r] - task.key0, 0, task.key1 - task.key0);
    AttendArgs a;
    a.kv = run.kv;
    a.kv_scale = run.k_scale;
    a.v_scale = run.v_scale;
    a.width = run.width;
    a.rank = R;
    a.k_offset = tile.k_offset;
    a.v_offset = tile.v_offset;
    a.q = tile.q;
    a.q_mul = run.q_mul;
    a.rows = rows;
    a.row_limit = limits.data();
    a.slots = tile.slots + task.key0;
    a.num_keys = task.key1 - task.key0;
    a.m = m, a.l = l, a.acc = acc;
    if (a.num_keys > 0) attend(a);
    if (task.part < 0) {
      // A fully masked row (no visible key) is 0, never NaN.
      for (int r = 0; r < rows; ++r)
        write_row(run.out_row(tile.out_index, r), run.out_dtype, acc + size_t(r) * R, R, l[r] == 0.0f ? 0.0f : 1.0f / l[r]);
    } else if (pending[task.tile].fetch_sub(1, std::memory_order_acq_rel) == 1) {
      merge(task.tile);
    }
  }

}

}  // namespace attn::mla
