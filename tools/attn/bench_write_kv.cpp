// `attn bench` write_kv figures: storing a step's new K/V into cpu_flash's cache (its layout and
// block size, Llama-3.1-8B attention: 8 KV heads x 128, bf16), the one store routine every
// engine path takes (write_kv, run with new K/V, attn run, Python).
//   prefill_2048: a 2048-token prompt (8 MiB of K/V in, 8 MiB into the cache). Its ceiling is a
//     plain memcpy of the same bytes from the same sources into destinations rotated over the same
//     pool, timed interleaved with the writes: fraction_of_copy = copy time / write time.
//   decode_b8: one token for each of 8 sequences, against the attend of B=8 ctx 4096 it precedes
//     (fraction_of_attend = write time / attend time).
// Destinations rotate over a pool several times the last-level cache, so both write to DRAM; the
// 8 MiB of sources are reused and may sit in the last-level cache for both, as a just-computed
// K/V projection does in an engine.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "attn/attn.hpp"
#include "testkit/bench_kit.hpp"
#include "bench_sets.hpp"

namespace attn_cli {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

constexpr int kKvHeads = 8, kHead = 128;

/// A Llama-3.1-8B attention layer on cpu_flash.
attn::Layer llama_layer(int threads) {
  attn::LayerParams p;
  p.config.num_heads = 32, p.config.num_kv_heads = kKvHeads, p.config.head_size = kHead;
  p.config.dtype = attn::DType::bfloat16;
  p.num_threads = threads;
  return attn::Layer::on_backend("cpu_flash", std::move(p));
}

attn::Buffer random_rows(int64_t tokens, uint32_t seed) {
  attn::Buffer b(attn::DType::bfloat16, {tokens, kKvHeads, kHead});
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  for (int64_t i = 0; i < b.view().numel(); ++i) attn::store_from_float(b.data(), attn::DType::bfloat16, i, dist(rng));
  return b;
}

/// Metadata of `seqs` sequences writing `query` tokens each after `context`, blocks shuffled.
attn::BatchMetadata step_metadata(int seqs, int context, int query, int32_t bs, int32_t& num_blocks) {
  const int per_seq = (context + query + bs - 1) / bs;
  num_blocks = per_seq * seqs;
  std::vector<int32_t> blocks(static_cast<std::size_t>(num_blocks));
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), std::mt19937(11));
  std::vector<attn::SequenceSpec> specs;
  for (int s = 0; s < seqs; ++s)
    specs.push_back({context, query, std::vector<int32_t>(blocks.begin() + s * per_seq, blocks.begin() + (s + 1) * per_seq)});
  return attn::BatchMetadata::build(specs, bs, num_blocks, true);
}

void prefill_figures(std::vector<NamedFigure>& out, bool quick, int threads, std::size_t pool_bytes) {
  const int tokens = 2048;
  const attn::Layer layer = llama_layer(threads);
  int32_t num_blocks = 0;
  const attn::BatchMetadata md = step_metadata(1, 0, tokens, layer.block_size(), num_blocks);
  const attn::Buffer k = random_rows(tokens, 1), v = random_rows(tokens, 2);
  const std::size_t bytes = 2 * k.bytes();  // K and V in; the same into the cache
  const int distinct = std::clamp(int(std::ceil(double(pool_bytes) / double(bytes))), 2, 64);
  std::vector<std::unique_ptr<attn::KVCache>> caches;
  std::vector<attn::Buffer> copies;
  for (int i = 0; i < distinct; ++i) {
    caches.push_back(std::make_unique<attn::KVCache>(layer.cache_spec(num_blocks)));
    caches.back()->fill(0.0f);  // first touch before timing
    copies.emplace_back(attn::DType::bfloat16, std::vector<int64_t>{int64_t(bytes / 2)});
    std::memset(copies.back().data(), 0, bytes);
  }
  const int reps = quick ? 3 : 15;
  std::vector<double> write_s, copy_s;
  std::size_t next = 0;
  for (int r = -1; r < reps; ++r) {  // r = -1: warm-up (OpenMP team, page tables)
    attn::KVCache& cache = *caches[next % caches.size()];
    auto t0 = Clock::now();
    layer.write_kv(k.view(), v.view(), cache, md);
    const double w = since(t0);
    char* dst = static_cast<char*>(copies[next % copies.size()].data());
    t0 = Clock::now();
#pragma omp parallel num_threads(threads)
    {  // the copy ceiling with the same threads, each its share of K then V
      const int n = omp_get_num_threads(), i = omp_get_thread_num();
      const std::size_t half = k.bytes(), lo = half * std::size_t(i) / std::size_t(n), hi = half * std::size_t(i + 1) / std::size_t(n);
      std::memcpy(dst + lo, static_cast<const char*>(k.data()) + lo, hi - lo);
      std::memcpy(dst + half + lo, static_cast<const char*>(v.data()) + lo, hi - lo);
    }
    const double c = since(t0);
    ++next;
    if (r >= 0) write_s.push_back(w), copy_s.push_back(c);
  }
  const double w = median(write_s), c = median(copy_s);
  const std::string note = "2048 tokens x 8 KV heads x 128, bf16 into " + std::string(attn::to_string(layer.cache_spec(1).layout)) +
                           ", " + std::to_string(distinct) + " caches rotated; median of " + std::to_string(reps);
  out.push_back({"write_kv.prefill_2048.ms", w * 1e3, "ms", note});
  out.push_back({"write_kv.prefill_2048.GBps", 2.0 * double(bytes) / w / 1e9, "GB/s", "bytes read + written"});
  out.push_back({"write_kv.prefill_2048.copy_ms", c * 1e3, "ms", "memcpy of the same bytes, interleaved"});
  out.push_back({"write_kv.prefill_2048.fraction_of_copy", c / w, "fraction", "copy time / write time (target >= 0.6)"});
}

void decode_figures(std::vector<NamedFigure>& out, bool quick, int threads) {
  const int batch = 8, context = quick ? 512 : 4096;
  const attn::Layer layer = llama_layer(threads);
  int32_t num_blocks = 0;
  const attn::BatchMetadata md = step_metadata(batch, context, 1, layer.block_size(), num_blocks);
  attn::KVCache cache(layer.cache_spec(num_blocks));
  cache.fill(0.03f);
  const attn::Buffer k = random_rows(batch, 3), v = random_rows(batch, 4);
  attn::Buffer q(attn::DType::bfloat16, {batch, 32, kHead}), o(attn::DType::bfloat16, {batch, 32, kHead});
  std::memset(q.data(), 0, q.bytes());
  const auto plan = layer.plan(md, cache.spec());
  attn::Workspace ws;
  ws.reserve(plan->workspace_bytes());
  attn::ForwardArgs args;
  args.q = q.view(), args.out = o.view(), args.cache = &cache, args.workspace = &ws;
  const int reps = quick ? 3 : 21;
  std::vector<double> write_s, attend_s;
  for (int r = -1; r < reps; ++r) {
    auto t0 = Clock::now();
    cache.write_validated(k.view(), v.view(), plan->metadata());
    const double w = since(t0);
    t0 = Clock::now();
    layer.run(*plan, args);
    const double a = since(t0);
    if (r >= 0) write_s.push_back(w), attend_s.push_back(a);
  }
  const double w = median(write_s), a = median(attend_s);
  const std::string shape = "decode_b8_ctx" + std::to_string(context);
  out.push_back({"write_kv." + shape + ".ms", w * 1e3, "ms", "one token for each of 8 sequences"});
  out.push_back({"write_kv." + shape + ".attend_ms", a * 1e3, "ms", "the attend it precedes (cache in DRAM only when ctx 4096)"});
  out.push_back({"write_kv." + shape + ".fraction_of_attend", w / a, "fraction", "write time / attend time (target <= 0.03)"});
}

}  // namespace

std::vector<NamedFigure> write_kv_figures(bool quick, int threads) {
  std::vector<NamedFigure> out;
  prefill_figures(out, quick, threads, attn_bench::choose_pool(quick).bytes);
  decode_figures(out, quick, threads);
  return out;
}

}  // namespace attn_cli
