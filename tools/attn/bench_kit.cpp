#include "bench_kit.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace attn_bench {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

#if defined(__x86_64__)
__attribute__((target("avx512f"))) float sum_avx512(const float* p, std::size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (std::size_t i = 0; i + 128 <= n; i += 128) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i)), a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32)), a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
    a4 = _mm512_add_ps(a4, _mm512_load_ps(p + i + 64)), a5 = _mm512_add_ps(a5, _mm512_load_ps(p + i + 80));
    a6 = _mm512_add_ps(a6, _mm512_load_ps(p + i + 96)), a7 = _mm512_add_ps(a7, _mm512_load_ps(p + i + 112));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                                            _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7))));
}

// 16 independent chains hide the FMA latency; each instruction is 16 lanes × 2 flop.
__attribute__((target("avx512f"))) double fma_avx512(long iters) {
  __m512 a[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm512_set1_ps(float(i));
  const __m512 b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(0.001f);
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < 16; ++i) a[i] = _mm512_fmadd_ps(a[i], b, c);
  __m512 s = a[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, a[i]);
  volatile float sink = _mm512_reduce_add_ps(s);
  (void)sink;
  return double(iters) * 16 * 32;
}

// Each vdpbf16ps is 32 bf16 products plus their adds into 16 fp32 lanes: 64 flop.
__attribute__((target("avx512f,avx512bf16"))) double dot_bf16(long iters) {
  __m512 a[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm512_set1_ps(float(i));
  const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3f80), c = (__m512bh)_mm512_set1_epi16(0x3a00);
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < 16; ++i) a[i] = _mm512_dpbf16_ps(a[i], b, c);
  __m512 s = a[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, a[i]);
  volatile float sink = _mm512_reduce_add_ps(s);
  (void)sink;
  return double(iters) * 16 * 64;
}
#endif

float sum_plain(const float* p, std::size_t n) {
  float s[8] = {};
  for (std::size_t i = 0; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += p[i + j];
  return std::accumulate(s, s + 8, 0.0f);
}

/// Best of 5 timed all-thread runs of `kernel(iters)` (returns flop per thread).
template <class K>
double peak_gflops(int threads, K kernel) {
  const long iters = 4'000'000;
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    double flop = 0;
    const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : flop)
    flop += kernel(iters);
    best = std::max(best, flop / since(t0) / 1e9);
  }
  return best;
}

}  // namespace

double dram_read_gbs(int threads, std::size_t bytes, int reps) {
  const std::size_t n = bytes / sizeof(float) / 128 * 128;
  float* buf = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
  const std::size_t per = n / std::size_t(threads) / 128 * 128;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::size_t i = 0; i < n; ++i) buf[i] = 1e-3f;  // first touch by the thread that reads it
  std::vector<double> gbs;
  volatile float sink = 0;
  for (int rep = 0; rep < reps; ++rep) {
    const auto t0 = Clock::now();
    float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      const float* p = buf + per * std::size_t(omp_get_thread_num());
#if defined(__x86_64__)
      total += __builtin_cpu_supports("avx512f") ? sum_avx512(p, per) : sum_plain(p, per);
#else
      total += sum_plain(p, per);
#endif
    }
    gbs.push_back(double(per) * threads * sizeof(float) / since(t0) / 1e9);
    sink = sink + total;
  }
  std::free(buf);
  std::sort(gbs.begin(), gbs.end());
  return gbs[gbs.size() / 2];
}

double fp32_fma_gflops(int threads) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return peak_gflops(threads, fma_avx512);
#endif
  return 0;
}

double bf16_dot_gflops(int threads) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512bf16")) return peak_gflops(threads, dot_bf16);
#endif
  return 0;
}

Workload::Workload(const Shape& s, const std::string& backend, int threads, std::size_t pool_bytes) {
  using namespace attn;
  LayerConfig cfg;
  cfg.num_heads = s.heads, cfg.num_kv_heads = s.kv_heads, cfg.head_size = s.head_size;
  cfg.dtype = DType::bfloat16, cfg.kv_cache_dtype = s.kv;
  cfg.sliding_window = s.window, cfg.has_sink = s.sinks;
  params_.config = cfg;
  params_.num_threads = threads;
  if (s.sinks) params_.sinks.assign(std::size_t(s.heads), 0.5f);
  auto desc = Registry::instance().find(backend);
  if (!desc) throw Error("bench: unknown backend " + backend);
  impl_ = Registry::instance().create(backend, params_);

  const int bs = desc->preferred_block_size, len = s.context + s.query_len;
  const int blocks_per_seq = (len + bs - 1) / bs;
  KVCacheSpec probe = desc->cache_spec(cfg, 1, bs);
  const double block_bytes = double(bs) * s.kv_heads * (probe.head_size + probe.v_width()) * double(dtype_size(probe.dtype));
  const double batch_bytes = block_bytes * blocks_per_seq * s.batch;
  const int instances = int(std::clamp(double(pool_bytes) / batch_bytes, 1.0, 64.0));
  const int num_blocks = instances * blocks_per_seq * s.batch;
  cache_ = std::make_unique<KVCache>(desc->cache_spec(cfg, num_blocks, bs));
  cache_->fill(0.03f);  // touches every page; values do not change the speed

  std::vector<int32_t> pool(static_cast<std::size_t>(num_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  std::mt19937 rng(7);
  std::shuffle(pool.begin(), pool.end(), rng);  // paged order, as after a long serving run
  std::size_t next = 0;
  for (int i = 0; i < instances; ++i) {
    std::vector<SequenceSpec> seqs;
    for (int b = 0; b < s.batch; ++b) {
      SequenceSpec sq{s.context, s.query_len, {}};
      for (int k = 0; k < blocks_per_seq; ++k) sq.block_ids.push_back(pool[next++]);
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
  double key_rows = 0, pairs = 0;
  for (int t = 0; t < s.query_len; ++t) {
    const int pos = s.context + t;
    const int lo = s.window > 0 ? std::max(0, pos - s.window + 1) : 0;
    pairs += pos + 1 - lo;
  }
  const int lo_first = s.window > 0 ? std::max(0, s.context - s.window + 1) : 0;
  key_rows = len - lo_first;
  kv_bytes_ = key_rows * s.batch * s.kv_heads * (probe.head_size + probe.v_width()) * double(dtype_size(probe.dtype));
  flops_ = pairs * s.batch * s.heads * 2.0 * (probe.head_size + probe.v_width());
}

Workload::~Workload() = default;

double Workload::run_once() {
  const attn::BatchMetadata& md = md_[next_++ % md_.size()];
  const auto t0 = Clock::now();
  impl_->forward(q_.view(), *cache_, md, out_.view());
  return since(t0);
}

double Workload::median_seconds(int reps) {
  run_once();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) t.push_back(run_once());
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::string Workload::variant() const { return impl_->variant(); }

}  // namespace attn_bench
