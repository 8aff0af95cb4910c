// Prepared attention workloads: instances of one batch laid out over the pool, rotated so
// consecutive calls read fresh KV.
#include "attn/limits.hpp"
#include "testkit/bench_kit.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

namespace attn_bench {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// First key a query at position `pos` sees.
int first_visible(const Shape& s, int pos) { return s.window > 0 ? std::max(0, pos - s.window + 1) : 0; }

}  // namespace

Workload::Workload(const Shape& s, const std::string& backend, int threads, std::size_t pool_bytes)
    : shape_(s), threads_(threads) {
  using namespace attn;
  LayerConfig cfg;
  cfg.num_heads = s.heads, cfg.num_kv_heads = s.kv_heads, cfg.head_size = s.head_size;
  cfg.dtype = DType::bfloat16, cfg.kv_cache_dtype = s.kv;
  cfg.sliding_window = s.window, cfg.has_sink = s.sinks;
  LayerParams params;
  params.config = cfg;
  params.num_threads = threads;
  if (s.sinks) params.sinks.assign(std::size_t(s.heads), 0.5f);
  layer_ = std::make_unique<Layer>(Layer::on_backend(backend, std::move(params)));

  const int bs = s.block_size > 0 ? s.block_size : layer_->descriptor().preferred_block_size, len = s.context + s.query_len;
  const int blocks_per_seq = (len + bs - 1) / bs;
  // Blocks wholly before the first visible key are never read: they share one filler block.
  const int skipped = first_visible(s, s.context) / bs, read_blocks = blocks_per_seq - skipped;
  KVCacheSpec probe = layer_->cache_spec(1, bs);
  // Per-token-head caches read each slot's two fp32 scales with its codes.
  const double row_bytes = double(s.kv_heads) * ((probe.stored_width(false) + probe.stored_width(true)) * double(dtype_size(probe.dtype)) +
                                                 (probe.token_scales() ? 2.0 * sizeof(float) : 0.0));
  const double read_bytes = row_bytes * bs * read_blocks * s.batch;
  // At least two instances, so a call never re-reads the previous call's KV, and enough that
  // one round of calls reads the whole pool.
  const int instances = pool_bytes == 0 ? 1 : std::max(2, int(std::ceil(double(pool_bytes) / read_bytes)));
  const int filler = instances * read_blocks * s.batch, num_blocks = filler + 1;
  KVCacheSpec spec = layer_->cache_spec(num_blocks, bs);
  if (s.layout) spec.layout = *s.layout;
  cache_ = std::make_unique<KVCache>(spec);
  // First touch from every thread, in chunks: blocks are read in shuffled order by whichever
  // thread takes the item, so pages spread over the nodes are what a serving process sees.
  auto* bytes = static_cast<unsigned char*>(cache_->data());
  const std::int64_t chunks = std::int64_t(cache_->bytes() >> 21) + 1;
#pragma omp parallel for schedule(static) num_threads(attn::team_size(threads))
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::size_t lo = std::size_t(c) << 21, hi = std::min(cache_->bytes(), lo + (std::size_t(1) << 21));
    if (lo < hi) std::memset(bytes + lo, 0, hi - lo);
  }
  cache_->fill(0.03f);  // values do not change the speed

  std::vector<int32_t> pool(static_cast<std::size_t>(filler));
  std::iota(pool.begin(), pool.end(), 0);
  std::mt19937 rng(7);
  std::shuffle(pool.begin(), pool.end(), rng);  // paged order, as after a long serving run
  std::size_t next = 0;
  for (int i = 0; i < instances; ++i) {
    std::vector<SequenceSpec> seqs;
    for (int b = 0; b < s.batch; ++b) {
      SequenceSpec sq{s.context, s.query_len, std::vector<int32_t>(std::size_t(skipped), filler)};
      for (int k = 0; k < read_blocks; ++k) sq.block_ids.push_back(pool[next++]);
      seqs.push_back(std::move(sq));
    }
    md_.push_back(BatchMetadata::build(seqs, bs, num_blocks, true));
  }
  const int tokens = md_[0].num_tokens;
  q_ = Buffer(DType::bfloat16, {tokens, s.heads, s.head_size});
  out_ = Buffer(DType::bfloat16, {tokens, s.heads, s.head_size});
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < q_.view().numel(); ++i) store_from_float(q_.data(), DType::bfloat16, i, u(rng));

  // What one call must move and compute: visible keys per query row.
  double pairs = 0;
  for (int t = 0; t < s.query_len; ++t) pairs += s.context + t + 1 - first_visible(s, s.context + t);
  const double key_rows = len - first_visible(s, s.context);
  kv_bytes_ = key_rows * s.batch * row_bytes;
  flops_ = pairs * s.batch * s.heads * 2.0 * (probe.head_size + probe.v_width());
}

Workload::~Workload() = default;

double Workload::run_once() {
  const attn::BatchMetadata& md = md_[take_instance()];
  const auto t0 = Clock::now();
  // plan + run on a workspace kept across calls, as an engine's step runs a layer: forward()'s
  // per-call scratch (mapped and zeroed each time: the packed K/V of a prefill, MBs) is the
  // one-call convenience path's cost, which `attn bench`'s step figures show on their own.
  const auto plan = layer_->plan(md, cache_->spec());
  ws_.reserve(plan->workspace_bytes());
  attn::ForwardArgs args;
  args.q = q_.view(), args.out = out_.view(), args.cache = cache_.get(), args.workspace = &ws_;
  layer_->run(*plan, args);
  return since(t0);
}

double Workload::median_seconds(int reps) {
  return median_after_warmup(reps, [this] { return run_once(); });
}

std::string Workload::variant() const { return layer_->variant(); }

}  // namespace attn_bench
