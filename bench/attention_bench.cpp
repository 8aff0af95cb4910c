// Google Benchmark view of Llama-3.1-8B shapes: each backend on decode (bf16 and fp8 caches)
// and causal prefill, with bytes/s and useful FLOP/s counters. Ceilings are reported by
// `attn bench`; this program is for per-shape, per-backend tracking. Calls rotate over the
// same pool `attn bench` uses (attn_bench::choose_pool), so decode reads DRAM.
#include <benchmark/benchmark.h>

#include <string>

#include "testkit/bench_kit.hpp"

namespace {

void run(benchmark::State& state, attn_bench::Shape shape, const std::string& backend) {
  attn_bench::Workload w(shape, backend, 0, backend == "reference" ? 0 : attn_bench::choose_pool(false).bytes);
  w.run_once();
  for (auto _ : state) state.SetIterationTime(w.run_once());
  state.counters["kv_bytes_per_s"] = benchmark::Counter(w.kv_bytes(), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["useful_flops"] = benchmark::Counter(w.useful_flops(), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(w.variant());
}

attn_bench::Shape decode(int batch, int ctx, attn::KVCacheDType kv) {
  attn_bench::Shape s;
  s.batch = batch, s.context = ctx, s.kv = kv;
  return s;
}

attn_bench::Shape prefill(int tokens) {
  attn_bench::Shape s;
  s.context = 0, s.query_len = tokens;
  return s;
}

const int kRegistered = [] {
  for (int b : {1, 8})
    for (int ctx : {4096, 16384})
      for (auto kv : {attn::KVCacheDType::bfloat16, attn::KVCacheDType::fp8_e4m3}) {
        const std::string name = "decode/b" + std::to_string(b) + "/ctx" + std::to_string(ctx) + "/" +
                                 std::string(attn::to_string(kv));
        benchmark::RegisterBenchmark(("cpu_flash/" + name).c_str(), run, decode(b, ctx, kv), "cpu_flash")
            ->UseManualTime()->Unit(benchmark::kMillisecond);
      }
  benchmark::RegisterBenchmark("cpu_flash/prefill/2048", run, prefill(2048), "cpu_flash")->UseManualTime()->Unit(benchmark::kMillisecond);
  // The reference on reduced shapes only (plain loops).
  benchmark::RegisterBenchmark("reference/decode/b1/ctx4096/bfloat16", run, decode(1, 4096, attn::KVCacheDType::bfloat16), "reference")
      ->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);
  benchmark::RegisterBenchmark("reference/prefill/512", run, prefill(512), "reference")
      ->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(1);
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
