// attn_cuda_bench: cuda_flash on the Llama-3.1-8B decode / prefill shapes, each figure set against
// this GPU's own measured ceilings — device-to-device copy bandwidth (what decode can approach)
// and a cuBLAS bf16 GEMM rate (what prefill's tensor-core work can approach).
//   attn_cuda_bench [--quick] [--json]
// Decode rows cycle through disjoint copies of the batch's KV, together larger than L2, so the
// bandwidth is HBM's and not the cache's.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "backends/cuda_flash/cuda_flash.hpp"
#include "backends/cuda_flash/module/cuda_check.hpp"

namespace {

using namespace attn;
using cuda_flash::check_cuda;

struct Timer {
  cudaEvent_t a, b;
  Timer() {
    check_cuda(cudaEventCreate(&a), "cudaEventCreate");
    check_cuda(cudaEventCreate(&b), "cudaEventCreate");
  }
  ~Timer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  void start() { check_cuda(cudaEventRecord(a), "cudaEventRecord"); }
  double stop_seconds() {
    check_cuda(cudaEventRecord(b), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    return ms * 1e-3;
  }
};

// Median of `reps` timings of `iters` back-to-back calls, per call.
template <typename F>
double time_per_call(F&& call, int iters, int reps) {
  Timer t;
  for (int i = 0; i < 3; ++i) call(i);
  check_cuda(cudaDeviceSynchronize(), "warm-up");
  std::vector<double> v;
  for (int r = 0; r < reps; ++r) {
    t.start();
    for (int i = 0; i < iters; ++i) call(i);
    v.push_back(t.stop_seconds() / iters);
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double copy_bandwidth(bool quick) {
  const std::size_t bytes = std::size_t(quick ? 256 : 1024) << 20;
  const auto gpu = cuda_flash::cuda_allocator();
  DeviceMemory src(gpu, bytes), dst(gpu, bytes);
  check_cuda(cudaMemset(src.data(), 1, bytes), "cudaMemset");
  const double t = time_per_call(
      [&](int) { check_cuda(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy D2D"); },
      5, 5);
  return 2.0 * double(bytes) / t;  // read + write
}

double cublas_bf16_rate(bool quick) {
  const int n = quick ? 4096 : 8192;
  const auto gpu = cuda_flash::cuda_allocator();
  DeviceMemory a(gpu, std::size_t(n) * n * 2), b(gpu, std::size_t(n) * n * 2), c(gpu, std::size_t(n) * n * 2);
  check_cuda(cudaMemset(a.data(), 0, a.bytes()), "cudaMemset");
  check_cuda(cudaMemset(b.data(), 0, b.bytes()), "cudaMemset");
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) throw Error("cublasCreate failed");
  const float one = 1.0f, zero = 0.0f;
  const double t = time_per_call(
      [&](int) {
        if (cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.data(), CUDA_R_16BF, n, b.data(), CUDA_R_16BF, n, &zero,
                         c.data(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
          throw Error("cublasGemmEx failed");
      },
      5, 5);
  cublasDestroy(h);
  return 2.0 * double(n) * n * n / t;
}

struct Shape {
  std::string name;
  int heads, kv_heads, head_size;
  KVCacheDType kv;
  int batch, context, query;  // query = 1: decode; else a causal prompt of `query` tokens
  int window = 0;
  bool sinks = false;
};

struct Row {
  std::string name;
  double seconds, figure, ceiling;
  const char* unit;
};

Row run_shape(const Shape& s, double copy_bw, double gemm_rate, bool quick) {
  LayerParams params;
  LayerConfig& c = params.config;
  c.num_heads = s.heads;
  c.num_kv_heads = s.kv_heads;
  c.head_size = s.head_size;
  c.dtype = DType::bfloat16;
  c.kv_cache_dtype = s.kv;
  c.sliding_window = s.window;
  c.has_sink = s.sinks;
  if (s.sinks) params.sinks.assign(std::size_t(s.heads), 0.5f);
  const int bs = 16;
  const DType storage = kv_storage_dtype(s.kv, DType::bfloat16);
  const int len = s.context + s.query;
  const int blocks_per_seq = (len + bs - 1) / bs;
  const double kv_bytes = double(s.batch) * len * s.kv_heads * s.head_size * 2 * double(dtype_size(storage));
  // Decode: enough disjoint instances that consecutive calls never find their KV in L2.
  const int instances = s.query == 1 ? std::max(1, int(std::ceil((quick ? 256e6 : 1e9) / kv_bytes))) : 1;
  KVCacheSpec spec;
  spec.num_blocks = instances * s.batch * blocks_per_seq;
  spec.block_size = bs;
  spec.num_kv_heads = s.kv_heads;
  spec.head_size = s.head_size;
  spec.dtype = storage;
  spec.kv_cache_dtype = s.kv;
  const auto gpu = cuda_flash::cuda_allocator();
  KVCache cache(spec, gpu);
  gpu->memset(cache.data(), 0x3c, cache.bytes());  // bf16 ~0.011, fp8 1.5: finite, the values do not matter for timing
  if (storage == DType::fp8_e4m3) cache.set_scales({0.01f}, {0.01f});

  // Each instance's step planned once (metadata uploaded), outside the timed loop: the time is
  // the per-layer run.
  const cuda_flash::CudaFlashAttention impl(params);
  std::vector<std::shared_ptr<const StepPlan>> plans;
  for (int i = 0; i < instances; ++i) {
    std::vector<SequenceSpec> seqs;
    for (int b = 0; b < s.batch; ++b) {
      SequenceSpec q{s.context, s.query, {}};
      for (int k = 0; k < blocks_per_seq; ++k) q.block_ids.push_back((i * s.batch + b) * blocks_per_seq + k);
      seqs.push_back(q);
    }
    plans.push_back(impl.plan(BatchMetadata::build(seqs, bs, spec.num_blocks), spec));
  }
  const int64_t tokens = int64_t(s.batch) * s.query;
  DeviceMemory q(gpu, std::size_t(tokens) * s.heads * s.head_size * 2), out(gpu, q.bytes());
  Workspace ws(gpu);
  check_cuda(cudaMemset(q.data(), 0x3c, q.bytes()), "cudaMemset(q)");
  TensorView qv = TensorView::contiguous(q.data(), DType::bfloat16, {tokens, s.heads, s.head_size});
  TensorView ov = TensorView::contiguous(out.data(), DType::bfloat16, {tokens, s.heads, s.head_size});
  qv.device = ov.device = DeviceKind::cuda;

  const int iters = s.query == 1 ? std::max(instances, 20) : 5;
  ForwardArgs args;
  args.q = qv, args.out = ov, args.cache = &cache, args.workspace = &ws;
  const double t = time_per_call([&](int i) { impl.run(*plans[i % instances], args); }, iters, quick ? 3 : 7);
  impl.synchronize();
  if (s.query == 1) {
    // Bytes decode must read: the window's keys only, when there is one.
    const int read = s.window ? std::min(len, s.window) : len;
    const double bytes = kv_bytes * read / len;
    return {s.name, t, bytes / t, copy_bw, "GB/s"};
  }
  // Useful FLOPs: QK and PV over visible (query, key) pairs only.
  double pairs = 0;
  for (int i = 0; i < s.query; ++i) {
    const int qpos = s.context + i;
    pairs += s.window ? std::min(qpos + 1, s.window) : qpos + 1;
  }
  const double flops = 4.0 * s.batch * s.heads * s.head_size * pairs;
  return {s.name, t, flops / t, gemm_rate, "TFLOP/s"};
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, json = false;
  for (int i = 1; i < argc; ++i) {
    quick |= std::strcmp(argv[i], "--quick") == 0;
    json |= std::strcmp(argv[i], "--json") == 0;
  }
  try {
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    const double copy_bw = copy_bandwidth(quick);
    const double gemm = cublas_bf16_rate(quick);
    using K = KVCacheDType;
    std::vector<Shape> shapes = {
        {"decode llama8b B=1 L=4096 bf16", 32, 8, 128, K::auto_, 1, 4095, 1},
        {"decode llama8b B=8 L=4096 bf16", 32, 8, 128, K::auto_, 8, 4095, 1},
        {"decode llama8b B=1 L=16384 bf16", 32, 8, 128, K::auto_, 1, 16383, 1},
        {"decode llama8b B=8 L=16384 bf16", 32, 8, 128, K::auto_, 8, 16383, 1},
        {"decode llama8b B=8 L=4096 fp8", 32, 8, 128, K::fp8_e4m3, 8, 4095, 1},
        {"decode llama8b B=8 L=16384 fp8", 32, 8, 128, K::fp8_e4m3, 8, 16383, 1},
        {"prefill llama8b 2048 causal bf16", 32, 8, 128, K::auto_, 1, 0, 2048},
        {"decode gpt-oss B=8 L=4096 win128+sinks", 64, 8, 64, K::auto_, 8, 4095, 1, 128, true},
        {"prefill gpt-oss 2048 win128+sinks", 64, 8, 64, K::auto_, 1, 0, 2048, 128, true},
    };
    std::vector<Row> rows;
    for (const Shape& s : shapes) {
      rows.push_back(run_shape(s, copy_bw, gemm, quick));
      std::fprintf(stderr, "  %-42s %9.1f us\n", s.name.c_str(), rows.back().seconds * 1e6);
    }
    if (json) {
      std::printf("{\"device\": \"%s\", \"copy_GBps\": %.1f, \"cublas_bf16_TFLOPs\": %.1f", prop.name, copy_bw / 1e9, gemm / 1e12);
      for (const Row& r : rows) std::printf(", \"%s\": %.4f", r.name.c_str(), r.figure / r.ceiling);
      std::printf("}\n");
      return 0;
    }
    std::printf("\ncuda_flash on %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
    std::printf("ceilings: D2D copy %.0f GB/s (read+write), cuBLAS bf16 GEMM %.0f TFLOP/s\n\n", copy_bw / 1e9, gemm / 1e12);
    std::printf("| shape | time (us) | achieved | ceiling | fraction |\n|---|---:|---:|---:|---:|\n");
    for (const Row& r : rows) {
      const double scale = std::strcmp(r.unit, "GB/s") == 0 ? 1e9 : 1e12;
      std::printf("| %s | %.1f | %.1f %s | %.1f %s | %.0f %% |\n", r.name.c_str(), r.seconds * 1e6, r.figure / scale, r.unit,
                  r.ceiling / scale, r.unit, 100.0 * r.figure / r.ceiling);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attn_cuda_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
