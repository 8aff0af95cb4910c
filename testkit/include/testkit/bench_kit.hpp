#pragma once
/// Shared by `attn bench` and bench/ (Google Benchmark): the machine's ceilings and prepared
/// attention workloads whose consecutive calls read data rotated over a pool larger than the
/// last-level cache, so bandwidth figures are DRAM figures (dram_pool_min states the rule).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "testkit/bench_simd.hpp"

namespace attn_bench {

/// Total last-level cache of the machine (every distinct LLC instance summed), and where the
/// figure came from: "sysfs", "sysconf" or "cpuid" (the last two see one instance only).
struct LastLevelCache {
  std::size_t bytes = 0;  // 0 = unknown
  int level = 0, instances = 0;
  std::string source;
};
const LastLevelCache& last_level_cache();

/// The pool rule, stated here only: data rotated over at least 4× the LLC is a DRAM pool, since
/// by the time a call's data comes round again three LLCs' worth of other data went through the
/// cache. The bytes that takes for an LLC of `llc_bytes`.
constexpr std::size_t dram_pool_min(std::size_t llc_bytes) { return 4 * llc_bytes; }
/// The DRAM pool of this machine: dram_pool_min of its LLC (1 GiB when the LLC is unknown).
std::size_t dram_pool_bytes();

/// The bytes consecutive calls rotate over (at least dram_pool_min to be a DRAM pool).
struct Pool {
  std::size_t bytes = 0;
  bool dram = false;  // false: the data may be cache-resident, figures are cache figures
  const char* label() const { return dram ? "dram" : "cache"; }
};
/// Full run: dram_pool_bytes() (at least 64 MiB). Quick: at most 64 MiB, labelled by the rule.
Pool choose_pool(bool quick);

/// A measured ceiling: every timed run kept, so a shared machine's spread shows. `value` is the
/// median (the statistic the kernels get), `p90` the 90th percentile (what a quiet moment of
/// the same machine gives).
struct Ceiling {
  double value = 0;          // GB/s or GFLOP/s; 0 = not available on this machine
  double p90 = 0;
  std::vector<double> samples;
  std::string instruction;   // "vfmadd231ps zmm", or why it is unavailable
  /// Adds runs and recomputes the median and 90th percentile over all of them.
  void add(const std::vector<double>& runs);
};

/// The q-quantile (0..1) of `v` by linear interpolation between order statistics; 0 when empty.
double quantile(std::vector<double> v, double q);

/// A streaming read (integer sum, 8 accumulators) over disjoint per-thread slices of a buffer
/// allocated and first-touched once, so it can be sampled between kernel runs cheaply.
class ReadStream {
 public:
  ReadStream(int threads, std::size_t bytes);
  /// GB/s of one pass over the whole buffer.
  double once();
  int threads() const { return threads_; }
  const char* instruction() const;

 private:
  int threads_;
  std::size_t per_;
  attn::Buffer storage_;
};

/// `reps` passes of a streaming read after one warm-up, GB/s.
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

/// This CPU named from its cpuid vendor, family and model numbers (never from the brand string
/// alone): "AMD family 0x1a model 0x02 (Zen 5), AMD EPYC 9R45".
struct CpuIdentity {
  std::string vendor, brand, microarchitecture;  // microarchitecture "" when the table lacks it
  unsigned family = 0, model = 0;
  std::string to_string() const;
};
const CpuIdentity& cpu_identity();
/// The microarchitecture of a (vendor, family, model), or "" when unknown.
std::string microarchitecture(const std::string& vendor, unsigned family, unsigned model);

/// Rows of one paged work item, in bytes: K row r of token t in block b sits at
/// base + b·block_stride + t·token_stride + head_offset, its V row v_offset further on.
struct PagedRows {
  const std::byte* base = nullptr;
  const int32_t* blocks = nullptr;
  int32_t block_size = 0, begin = 0, end = 0;
  int64_t block_stride = 0, token_stride = 0, head_offset = 0, v_offset = 0;
  int32_t k_bytes = 0, v_bytes = 0;
};

/// The results of `reps` calls of `once()` after one warm-up call.
template <class F>
std::vector<double> runs_after_warmup(int reps, F once) {
  once();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) t.push_back(once());
  return t;
}

/// Median of `reps` results of `once()` after one warm-up call (the statistic every figure gets).
template <class F>
double median_after_warmup(int reps, F once) {
  return quantile(runs_after_warmup(reps, once), 0.5);
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
  /// Seconds for one call, plan + run on a workspace kept across calls (the next instance).
  double run_once();
  /// Median seconds over `reps` calls after one warm-up.
  double median_seconds(int reps);
  /// The work items of one decode call on instance `i`: one per (sequence, kv head, 1024-key
  /// split) as cpu_flash's plan cuts decode, largest first (bench_paged.cpp).
  std::vector<PagedRows> paged_rows(std::size_t i) const;
  /// The instance the next call reads (advances the rotation every timed call shares).
  std::size_t take_instance() { return next_++ % md_.size(); }
  double kv_bytes() const { return kv_bytes_; }        // KV bytes one call must read
  double useful_flops() const { return flops_; }       // 2·(d + dv) per visible (query, key, head)
  int instances() const { return int(md_.size()); }
  attn::KVCache& cache() { return *cache_; }
  std::string variant() const;

 private:
  Shape shape_;
  int threads_ = 0;
  std::unique_ptr<attn::Layer> layer_;
  std::unique_ptr<attn::KVCache> cache_;
  std::vector<attn::BatchMetadata> md_;
  attn::Buffer q_, out_;
  attn::Workspace ws_;
  std::size_t next_ = 0;
  double kv_bytes_ = 0, flops_ = 0;
};

}  // namespace attn_bench
