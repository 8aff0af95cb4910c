// The paged-read ceiling of a decode shape: the KV rows one call reads, in the cache's block
// order, cut the way cpu_flash's plan cuts decode (per sequence, kv head and 1024-key split at
// absolute positions when the range is longer than one split, largest first, dynamic
// schedule), summed on the same threads. Nothing
// is computed, so it is the fastest read of the kernel's own layout.
#include <omp.h>

#include <algorithm>
#include <chrono>

#include "attn/limits.hpp"
#include "bench_kit.hpp"
#include "bench_simd.hpp"

namespace attn_bench {
namespace {

constexpr int32_t kSplit = 1024;  // cpu_flash's Tiling::split_len

using Clock = std::chrono::steady_clock;

}  // namespace

std::vector<PagedRows> Workload::paged_rows(std::size_t i) const {
  const attn::BatchMetadata& md = md_.at(i);
  const attn::PagedKV kv = cache_->view();
  const int64_t elem = int64_t(attn::dtype_size(kv.dtype));
  PagedRows base;
  base.base = static_cast<const std::byte*>(kv.base);
  base.block_size = kv.block_size;
  base.block_stride = kv.block_stride * elem, base.token_stride = kv.token_stride * elem, base.v_offset = kv.v_offset * elem;
  base.k_bytes = int32_t(kv.head_size * elem), base.v_bytes = int32_t((kv.head_size_v ? kv.head_size_v : kv.head_size) * elem);
  std::vector<PagedRows> items;
  auto add = [&](int s, int h, int32_t begin, int32_t end) {
    PagedRows r = base;
    r.blocks = md.blocks(s), r.begin = begin, r.end = end, r.head_offset = h * kv.head_stride * elem;
    items.push_back(r);
  };
  for (int s = 0; s < md.num_seqs; ++s) {
    const int32_t hi = md.seq_lens[s], pos = hi - 1;
    const int32_t lo = shape_.window > 0 ? std::max(0, pos - shape_.window + 1) : 0;
    const bool split = hi - lo > kSplit;  // a range that fits one split stays whole, as in the plan
    for (int h = 0; h < kv.num_kv_heads; ++h) {
      if (!split) add(s, h, lo, hi);
      for (int32_t k0 = lo - lo % kSplit; split && k0 < hi; k0 += kSplit) add(s, h, std::max(lo, k0), std::min(hi, k0 + kSplit));
    }
  }
  std::stable_sort(items.begin(), items.end(),
                   [](const PagedRows& a, const PagedRows& b) { return a.end - a.begin > b.end - b.begin; });
  return items;
}

double Workload::paged_read_once() {
  const std::size_t i = take_instance();
  if (items_.size() != md_.size()) items_.resize(md_.size());
  if (items_[i].empty()) items_[i] = paged_rows(i);
  const std::vector<PagedRows>& items = items_[i];
  const SimdKernels& k = simd();
  const int threads = attn::team_size(threads_);
  uint64_t total = 0;
  const auto t0 = Clock::now();
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) reduction(+ : total)
  for (std::size_t j = 0; j < items.size(); ++j) total += k.paged_sum(items[j]);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  volatile uint64_t sink = total;
  (void)sink;
  return seconds;
}

double Workload::paged_read_median_seconds(int reps) {
  return median_after_warmup(reps, [this] { return paged_read_once(); });
}

}  // namespace attn_bench
