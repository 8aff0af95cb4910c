#pragma once
/// Shared by `attn bench` and bench/ (Google Benchmark): the machine's ceilings and prepared
/// attention workloads over a paged cache larger than the last-level cache.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attn/attn.hpp"

namespace attn_bench {

/// DRAM read bandwidth, GB/s: all threads summing disjoint halves of a `bytes` buffer.
double dram_read_gbs(int threads, std::size_t bytes, int reps);
/// fp32 FMA peak (AVX-512 or AVX2), GFLOP/s over all threads; 0 when the CPU has neither.
double fp32_fma_gflops(int threads);
/// vdpbf16ps peak, GFLOP/s over all threads (64 flop per instruction); 0 without AVX512-BF16.
double bf16_dot_gflops(int threads);

struct Shape {
  std::string name;
  int heads = 32, kv_heads = 8, head_size = 128;
  int batch = 1, context = 4096, query_len = 1;  // context = tokens already cached
  attn::KVCacheDType kv = attn::KVCacheDType::auto_;
  int window = 0;
  bool sinks = false;
};

/// A prepared step for one backend: `instances` disjoint copies of the batch in one cache so
/// consecutive calls read KV the previous call did not leave in cache.
class Workload {
 public:
  Workload(const Shape& shape, const std::string& backend, int threads, std::size_t pool_bytes);
  ~Workload();
  /// Seconds for one forward call (the next instance).
  double run_once();
  /// Median seconds over `reps` calls after one warm-up.
  double median_seconds(int reps);
  double kv_bytes() const { return kv_bytes_; }        // KV bytes one call must read
  double useful_flops() const { return flops_; }       // 2·(d + dv) per visible (query, key, head)
  std::string variant() const;

 private:
  attn::LayerParams params_;
  std::unique_ptr<attn::AttentionImpl> impl_;
  std::unique_ptr<attn::KVCache> cache_;
  std::vector<attn::BatchMetadata> md_;
  attn::Buffer q_, out_;
  std::size_t next_ = 0;
  double kv_bytes_ = 0, flops_ = 0;
};

}  // namespace attn_bench
