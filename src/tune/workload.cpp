// Random inputs and caches for timing one layer config; one run per call.
#include "tune/workload.hpp"

#include <algorithm>
#include <chrono>

#include "attn/layer.hpp"

namespace attn::tune_detail {
namespace {

/// splitmix64 mapped to U(-1, 1): any values do for timing, as long as they are finite and vary.
void fill_random(void* data, DType dtype, int64_t n, uint64_t seed) {
  uint64_t s = seed;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    store_from_float(data, dtype, i, float(z >> 40) * (2.0f / 16777216.0f) - 1.0f);
  }
}

Buffer random_buffer(DType dtype, std::vector<int64_t> shape, uint64_t seed) {
  Buffer b(dtype, std::move(shape));
  fill_random(b.data(), dtype, b.view().numel(), seed);
  return b;
}

/// Top-k sparse layers: each query token attends the last index_topk positions up to its own.
Buffer last_positions(const BatchMetadata& md, int topk) {
  Buffer idx(DType::int32, {md.num_tokens, topk});
  auto* p = static_cast<int32_t*>(idx.data());
  std::fill(p, p + int64_t(md.num_tokens) * topk, -1);
  for (int s = 0; s < md.num_seqs; ++s) {
    for (int i = 0; i < md.query_len(s); ++i) {
      const int pos = md.context_len(s) + i, first = std::max(0, pos - topk + 1);
      for (int k = first; k <= pos; ++k) p[int64_t(md.query_start_loc[s] + i) * topk + (k - first)] = k;
    }
  }
  return idx;
}

}  // namespace

Workload::Workload(const LayerConfig& c, const Shape& shape, const BackendDescriptor& backend, int block_size) {
  std::vector<SequenceSpec> seqs;
  int32_t next_block = 0;
  for (std::size_t s = 0; s < shape.query_lens.size(); ++s) {
    SequenceSpec seq{shape.context_lens[s], shape.query_lens[s], {}};
    const int64_t blocks = (seq.context_len + seq.query_len + block_size - 1) / block_size;
    for (int64_t b = 0; b < blocks; ++b) seq.block_ids.push_back(next_block++);
    seqs.push_back(std::move(seq));
  }
  md_ = BatchMetadata::build(seqs, block_size, next_block, c.causal());
  cache_ = std::make_unique<KVCache>(backend.cache_spec(c, next_block, block_size));
  const KVCacheSpec& spec = cache_->spec();
  fill_random(cache_->data(), spec.dtype, spec.bytes() / int64_t(dtype_size(spec.dtype)), 1);
  q_ = random_buffer(c.dtype, {md_.num_tokens, c.num_heads, c.head_size}, 2);
  out_ = Buffer(c.dtype, {md_.num_tokens, c.num_heads, spec.v_width()});
  if (c.use_sparse) topk_ = last_positions(md_, c.index_topk);
}

ForwardArgs Workload::args(Workspace& ws) const {
  ForwardArgs a;
  a.q = q_.view();
  a.out = out_.view();
  a.cache = cache_.get();
  if (topk_.data()) a.topk_indices = topk_.view();
  a.workspace = &ws;
  return a;
}

TimedRun::TimedRun(const LayerParams& params, const std::string& backend, const Workload& workload)
    : workload_(&workload), layer_(Layer::on_backend(backend, params)),
      plan_(layer_.plan(workload.metadata(), workload.cache().spec())) {}

double TimedRun::run_once(Workspace& ws) const {
  ws.reserve(plan_->workspace_bytes());
  const ForwardArgs args = workload_->args(ws);
  const auto t0 = std::chrono::steady_clock::now();
  layer_.run(*plan_, args);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace attn::tune_detail
