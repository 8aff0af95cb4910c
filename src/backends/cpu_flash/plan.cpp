#include "backends/cpu_flash/plan.hpp"

#include <algorithm>
#include <sstream>

namespace attn::cpu_flash {

void visible_keys(int32_t seq_len, int32_t p0, int32_t p1, const PlanShape& shape, int32_t& lo, int32_t& hi) {
  hi = shape.causal ? std::min(seq_len, p1 + 1) : seq_len;
  lo = shape.window > 0 ? std::max(0, p0 - shape.window + 1) : 0;
  if (hi < lo) hi = lo;
}

Plan make_plan(const BatchMetadata& md, const PlanShape& shape, const Tiling& tiling) {
  Plan plan;
  const int g = shape.group;
  const int tile_tokens = std::max(1, tiling.rows_per_tile / g);
  for (int s = 0; s < md.num_seqs; ++s) {
    const int32_t qlen = md.query_len(s), len = md.seq_lens[s];
    const int32_t first_pos = len - qlen;
    for (int32_t t0 = 0; t0 < qlen; t0 += tile_tokens) {
      const int32_t t1 = std::min(qlen, t0 + tile_tokens);
      const int rows = (t1 - t0) * g;
      int32_t lo, hi;
      const int32_t p0 = first_pos + t0, p1 = first_pos + t1 - 1;
      // A query inside a multimodal prefix sees to the prefix's end (the last row's limit bounds all).
      visible_keys(len, p0, BatchMetadata::mm_causal_limit(shape.mm_ranges, s, p1), shape, lo, hi);
      const bool mm = shape.mm_ranges && shape.mm_ranges[2 * s] < shape.mm_ranges[2 * s + 1] &&
                      p0 < shape.mm_ranges[2 * s + 1] && p1 >= shape.mm_ranges[2 * s];
      // Decode-like tiles over a long range split it at fixed absolute positions, so a
      // sequence is cut the same way whatever else is in the batch.
      const bool split = rows <= tiling.split_max_rows && hi - lo > tiling.split_len;
      for (int h = 0; h < shape.num_kv_heads; ++h) {
        WorkItem it;
        it.seq = s, it.kv_head = h, it.q_begin = t0, it.q_end = t1, it.mm = mm;
        if (!split) {
          it.kv_begin = lo, it.kv_end = hi;
          it.cost = int64_t(rows) * std::max(1, hi - lo);
          plan.items.push_back(it);
          continue;
        }
        Merge m{s, h, t0, t1, plan.partial_floats, 0};
        for (int32_t k0 = lo - lo % tiling.split_len; k0 < hi; k0 += tiling.split_len) {
          it.kv_begin = std::max(lo, k0), it.kv_end = std::min(hi, k0 + tiling.split_len);
          it.partial = plan.partial_floats;
          it.cost = int64_t(rows) * (it.kv_end - it.kv_begin);
          plan.partial_floats += partial_floats(rows, shape.head_size_v);
          plan.items.push_back(it);
          ++m.count;
        }
        plan.merges.push_back(m);
      }
    }
  }
  // One (sequence, KV head) after another, so the threads taking items in turn read the same
  // K/V while it is still in their caches (a KV head's packed tiles are re-read by every query
  // tile); within one, largest first, so the tail of small items fills in behind the large ones
  // (dynamic schedule). Measured against largest-first over the whole step on the prefill bench
  // (Llama-3.1-8B 2048, 2 threads, Emerald Rapids): fp32 tiles 162 -> 119 ms, AMX 44 -> 39 ms.
  std::stable_sort(plan.items.begin(), plan.items.end(), [](const WorkItem& a, const WorkItem& b) {
    if (a.seq != b.seq || a.kv_head != b.kv_head) return a.seq != b.seq ? a.seq < b.seq : a.kv_head < b.kv_head;
    return a.cost > b.cost;
  });
  return plan;
}

std::string Plan::to_string() const {
  std::ostringstream os;
  os << "Plan(" << items.size() << " items, " << merges.size() << " merges, " << partial_floats << " partial floats)";
  for (const WorkItem& it : items)
    os << "\n  seq " << it.seq << " kv_head " << it.kv_head << " q[" << it.q_begin << "," << it.q_end << ") kv["
       << it.kv_begin << "," << it.kv_end << ")" << (it.partial >= 0 ? " split" : "");
  return os.str();
}

}  // namespace attn::cpu_flash
