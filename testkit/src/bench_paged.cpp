// The work items of a decode call: the KV rows one call reads, in the cache's block order, cut
// the way cpu_flash's plan cuts decode (per sequence, kv head and 1024-key split at absolute
// positions when the range is longer than one split; one sequence and kv head after another,
// largest first within each). bench/attn_decode_stages times each stage of the kernel over
// exactly these items.
#include <algorithm>

#include "testkit/bench_kit.hpp"

namespace attn_bench {
namespace {

constexpr int32_t kSplit = 1024;  // cpu_flash's Tiling::split_len

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
      const std::size_t first = items.size();
      if (!split) add(s, h, lo, hi);
      for (int32_t k0 = lo - lo % kSplit; split && k0 < hi; k0 += kSplit) add(s, h, std::max(lo, k0), std::min(hi, k0 + kSplit));
      std::stable_sort(items.begin() + std::ptrdiff_t(first), items.end(),
                       [](const PagedRows& a, const PagedRows& b) { return a.end - a.begin > b.end - b.begin; });
    }
  }
  return items;
}

}  // namespace attn_bench
