#include "kernels/gather/attend_tiles.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>

#include "kernels/gather/mla_forward.hpp"
#include "kernels/gather/mla_kernel.hpp"
#include "cpu/threads.hpp"

namespace attn::mla {
namespace {

// A split needs enough keys to amortize its partial state and the merge.
constexpr int kMinKeysPerSplit = 256;

}  // namespace

void TilePlan::plan_tasks(int threads, int rank) {
  tasks.clear(), part_offset.clear();
  num_splits.assign(tiles.size(), 1);
  first_part.assign(tiles.size(), -1);
  part_floats = 0;
  max_rows = 0;
  for (const Tile& t : tiles) max_rows = std::max(max_rows, t.rows);
  const int want = 2 * threads;
  for (std::size_t ti = 0; ti < tiles.size(); ++ti) {
    const Tile& t = tiles[ti];
    int splits = 1;
    if (int(tiles.size()) < want) {
      const int per_tile = (want + int(tiles.size()) - 1) / int(tiles.size());
      splits = std::max(1, std::min(per_tile, t.num_keys / kMinKeysPerSplit));
    }
    num_splits[ti] = splits;
    if (splits > 1) first_part[ti] = int(part_offset.size());
    for (int k = 0; k < splits; ++k) {
      tasks.push_back({int(ti), k});
      if (splits > 1) {
        part_offset.push_back(part_floats);
        part_floats += int64_t(t.rows) * (rank + 2);
      }
    }
  }
}

std::size_t TilePlan::run_bytes() const {
  return WorkspaceCarver::round(std::size_t(part_floats) * sizeof(float)) + WorkspaceCarver::round(tiles.size() * sizeof(int));
}

void run_tiles(const TileRun& run, const TilePlan& plan) {
  const std::vector<Tile>& tiles = plan.tiles;
  if (tiles.empty()) return;
  const int threads = cpu::team_size(run.num_threads);
  const int R = run.rank;
  WorkspaceCarver carve{static_cast<char*>(run.buffers)};
  float* parts = carve.take<float>(std::size_t(plan.part_floats));
  int* pending = carve.take<int>(tiles.size());
  for (std::size_t ti = 0; ti < tiles.size(); ++ti) pending[ti] = plan.num_splits[ti];
  const AttendFn attend = best_attend();
  auto keys_of = [&](int ti) { return run.num_keys ? run.num_keys[ti] : tiles[std::size_t(ti)].num_keys; };

  // The last split of a tile to finish merges it (log-sum-exp), so a split call still forks and
  // joins once: on a loaded machine each extra join waits for a descheduled thread.
  auto merge = [&](int ti, std::vector<float>& merged) {
    const int rows = tiles[std::size_t(ti)].rows, first = plan.first_part[std::size_t(ti)], n = plan.num_splits[std::size_t(ti)];
    for (int r = 0; r < rows; ++r) {
      float M = -INFINITY;
      for (int p = 0; p < n; ++p) M = std::max(M, parts[plan.part_offset[std::size_t(first + p)] + r]);
      float L = 0.0f;
      std::fill(merged.begin(), merged.end(), 0.0f);
      for (int p = 0; p < n && M != -INFINITY; ++p) {
        const float* base = parts + plan.part_offset[std::size_t(first + p)];
        if (base[r] == -INFINITY) continue;
        const float w = std::exp2(base[r] - M);
        L += base[rows + r] * w;
        const float* acc = base + 2 * rows + std::size_t(r) * R;
        for (int d = 0; d < R; ++d) merged[std::size_t(d)] += acc[d] * w;
      }
      write_row(out_row(run, tiles[std::size_t(ti)], r), run.out->dtype, merged.data(), R, L == 0.0f ? 0.0f : 1.0f / L);
    }
  };

  const int max_rows = plan.max_rows;
  auto args_for = [&](const Tile& tile, int rows, float* state, const int32_t* limits) {
    AttendArgs a;
    a.kv = run.kv;
    const int scale = std::max(tile.kv_head, 0);
    a.kv_scale = run.k_scales ? run.k_scales[scale] : 1.0f;
    a.v_scale = run.v_scales ? run.v_scales[scale] : 1.0f;
    a.width = run.width;
    a.rank = R;
    if (tile.kv_head >= 0) a.k_offset = tile.kv_head * run.kv->head_stride, a.v_offset = a.k_offset + run.kv->v_offset;
    a.q = run.q + tile.q_offset;
    a.q_mul = run.q_mul;
    a.rows = rows;
    a.row_limit = limits;
    a.m = state, a.l = state + rows, a.acc = state + 2 * rows;
    return a;
  };

#pragma omp parallel num_threads(threads)
  {
    // Per-thread scratch (here and the kernel's own) grown to the plan's largest tile before any
    // task runs, so a warm step allocates nothing whichever thread takes which task.
    thread_local std::vector<float> own, merged;
    thread_local std::vector<int32_t> limits;
    own.resize(std::max(own.size(), std::size_t(max_rows) * (R + 2)));
    limits.resize(std::max(limits.size(), std::size_t(max_rows)));
    merged.resize(std::max(merged.size(), std::size_t(R)));
    {
      AttendArgs warm = args_for(tiles.front(), max_rows, own.data(), limits.data());
      warm.q = run.q;  // the run's q holds at least max_rows rows
      std::fill(limits.begin(), limits.begin() + max_rows, 0);
      std::fill(own.begin(), own.begin() + max_rows, -INFINITY);
      std::fill(own.begin() + max_rows, own.begin() + std::ptrdiff_t(max_rows) * (R + 2), 0.0f);
      warm.slots = run.slots, warm.num_keys = 0;
      attend(warm);
    }
#pragma omp for schedule(dynamic, 1)
    for (std::size_t i = 0; i < plan.tasks.size(); ++i) {
      const TilePlan::Task& task = plan.tasks[i];
      const Tile& tile = tiles[std::size_t(task.tile)];
      const int rows = tile.rows, splits = plan.num_splits[std::size_t(task.tile)];
      // Splits cut the planned key count; the last one takes whatever a listed run holds past it.
      const int nk = keys_of(task.tile), per = (tile.num_keys + splits - 1) / splits;
      const int key0 = std::min(nk, task.split * per), key1 = task.split == splits - 1 ? nk : std::min(nk, (task.split + 1) * per);
      float* state;
      if (splits > 1) {
        state = parts + plan.part_offset[std::size_t(plan.first_part[std::size_t(task.tile)] + task.split)];
      } else {
        state = own.data();
      }
      float* m = state;
      float* l = m + rows;
      float* acc = l + rows;
      std::fill(m, m + rows, -INFINITY);
      std::fill(l, l + rows + std::size_t(rows) * R, 0.0f);
      const int32_t* visible = tile.visible_offset >= 0 ? plan.visible.data() + tile.visible_offset : nullptr;
      for (int r = 0; r < rows; ++r) limits[std::size_t(r)] = std::clamp((visible ? visible[r] : nk) - key0, 0, key1 - key0);
      AttendArgs a = args_for(tile, rows, state, limits.data());
      a.slots = run.slots + (run.num_keys ? int64_t(task.tile) * run.list_stride : tile.slots_offset) + key0;
      a.num_keys = key1 - key0;
      if (a.num_keys > 0) attend(a);
      if (splits == 1) {
        // A fully masked row (no visible key) is 0, never NaN.
        for (int r = 0; r < rows; ++r)
          write_row(out_row(run, tile, r), run.out->dtype, acc + std::size_t(r) * R, R, l[r] == 0.0f ? 0.0f : 1.0f / l[r]);
      } else if (std::atomic_ref<int>(pending[task.tile]).fetch_sub(1, std::memory_order_acq_rel) == 1) {
        merge(task.tile, merged);
      }
    }
  }
}

}  // namespace attn::mla
