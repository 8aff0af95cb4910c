#pragma once
/// Shared by `attn bench` and bench/ (Google Benchmark): the machine's ceilings and prepared
/// attention workloads whose consecutive calls read data rotated over a pool larger than the
/// last-level cache, so bandwidth figures are DRAM figures (bench_pool.cpp decides the pool).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "bench_simd.hpp"

namespace attn_bench {

/// Total last-level cache of the machine (every distinct LLC instance summed), and where the
/// figure came from: "sysfs", "sysconf" or "cpuid" (the last two see one instance only).
struct LastLevelCache {
  std::size_t bytes = 0;  // 0 = unknown
  int level = 0, instances = 0;
  std::string source;
};
const LastLevelCache& last_level_cache();

/// The bytes consecutive calls rotate over. A DRAM pool is at least 4× the LLC, so by the time
/// a call's data comes round again three LLCs' worth of other data went through the cache.
struct Pool {
  std::size_t bytes = 0;
  bool dram = false;  // false: the data may be cache-resident, figures are cache figures
  const char* label() const { return dram ? "dram" : "cache"; }
};
/// Full run: 4× the LLC (1 GiB when it is unknown). Quick: at most 64 MiB, labelled by the rule.
Pool choose_pool(bool quick);

/// A measured ceiling: the median of timed runs and the instruction stream that was timed.
struct Ceiling {
  double value = 0;          // GB/s or GFLOP/s; 0 = not available on this machine
  std::string instruction;   // "vfmadd231ps zmm", or why it is unavailable
};

/// Streaming read (integer sum, 8 accumulators) of disjoint slices of a `bytes` buffer, GB/s.
Ceiling read_bandwidth(int threads, std::size_t bytes, int reps);
/// In-place read-modify-write stream of disjoint slices, GB/s of bytes read + written: the
/// ceiling for kernels that update state in place (the mixers' decode).
Ceiling read_write_bandwidth(int threads, std::size_t bytes, int reps);
/// fp32 FMA throughput, GFLOP/s over `threads` (AVX-512 zmm, else AVX2 ymm).
Ceiling fp32_fma(int threads, int reps);
/// vdpbf16ps zmm throughput, GFLOP/s (64 flop per instruction); 0 without AVX512-BF16.
Ceiling bf16_dot(int threads, int reps);
/// tdpbf16ps throughput, GFLOP/s (16·16·32·2 flop per instruction); 0 when the CPU lacks AMX
/// or the OS does not grant tile data.
Ceiling amx_bf16(int threads, int reps);

/// Median of `reps` results of `once()` after one warm-up call (the statistic every figure gets).
template <class F>
double median_after_warmup(int reps, F once) {
  once();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) t.push_back(once());
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Shape {
  std::string name;
  int heads = 32, kv_heads = 8, head_size = 128;
  int batch = 1, context = 4096, query_len = 1;  // context = tokens already cached
  attn::KVCacheDType kv = attn::KVCacheDType::auto_;
  int window = 0;
  bool sinks = false;
  int block_size = 0;  // 0: the backend's preferred block size
  std::optional<attn::KVLayout> layout;  // unset: the layout the backend's cache_spec gives
};

/// A prepared step for one backend: enough disjoint copies ("instances") of the batch in one
/// cache that consecutive calls never read the previous call's KV and together span the pool.
/// Key blocks a call never reads (before a sliding window) all alias one filler block, so the
/// pool holds only bytes that are read.
class Workload {
 public:
  /// `pool_bytes` = 0: one instance (the reference, timed for a ratio only).
  Workload(const Shape& shape, const std::string& backend, int threads, std::size_t pool_bytes);
  ~Workload();
  /// Seconds for one forward call (the next instance).
  double run_once();
  /// Median seconds over `reps` calls after one warm-up.
  double median_seconds(int reps);
  /// Median seconds of a pure read of exactly the KV rows one decode call reads, in the cache's
  /// block order, split per (sequence, kv head, 1024 keys) over the threads (bench_paged.cpp).
  double paged_read_median_seconds(int reps);
  /// The work items of that read for instance `i`: one per (sequence, kv head, 1024-key split)
  /// as cpu_flash's plan cuts decode, largest first.
  std::vector<PagedRows> paged_rows(std::size_t i) const;
  /// The instance the next call reads (advances the rotation every timed call shares).
  std::size_t take_instance() { return next_++ % md_.size(); }
  double kv_bytes() const { return kv_bytes_; }        // KV bytes one call must read
  double useful_flops() const { return flops_; }       // 2·(d + dv) per visible (query, key, head)
  int instances() const { return int(md_.size()); }
  attn::KVCache& cache() { return *cache_; }
  std::string variant() const;

 private:
  double paged_read_once();

  Shape shape_;
  int threads_ = 0;
  attn::LayerParams params_;
  std::unique_ptr<attn::AttentionImpl> impl_;
  std::unique_ptr<attn::KVCache> cache_;
  std::vector<attn::BatchMetadata> md_;
  std::vector<std::vector<PagedRows>> items_;  // per instance, built on first use
  attn::Buffer q_, out_;
  std::size_t next_ = 0;
  double kv_bytes_ = 0, flops_ = 0;
};

}  // namespace attn_bench
