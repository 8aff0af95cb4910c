// Selector decision latency: a cached decision (the per-layer cost during model set-up and in
// hot paths that re-select) vs an uncached one (every backend's capabilities checked), plus the
// generic checker alone. Medians over repetitions:
//   build/attn_selector_bench --benchmark_repetitions=9 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "attn/attn.hpp"

namespace {

attn::LayerConfig llama_layer() {
  attn::LayerConfig c;  // Llama-3-8B: 32 heads, 8 KV heads, head 128, bf16
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_size = 128;
  return c;
}

attn::SelectOptions no_env() {
  attn::SelectOptions o;
  o.use_env = false;
  return o;
}

void BM_SelectCached(benchmark::State& state) {
  const auto cfg = llama_layer();
  const auto opts = no_env();
  attn::select(cfg, opts);  // warm the entry
  for (auto _ : state) benchmark::DoNotOptimize(attn::select(cfg, opts));
}
BENCHMARK(BM_SelectCached)->ThreadRange(1, 2);

void BM_SelectUncached(benchmark::State& state) {
  const auto cfg = llama_layer();
  const auto opts = no_env();
  for (auto _ : state) {
    attn::clear_selector_cache();  // an empty-map clear: negligible next to the decision
    benchmark::DoNotOptimize(attn::select(cfg, opts));
  }
}
BENCHMARK(BM_SelectUncached);

void BM_SelectUncachedPlanningTarget(benchmark::State& state) {
  const auto cfg = llama_layer();
  auto opts = no_env();
  opts.platform = attn::parse_platform("cpu:avx2");
  for (auto _ : state) {
    attn::clear_selector_cache();
    benchmark::DoNotOptimize(attn::select(cfg, opts));
  }
}
BENCHMARK(BM_SelectUncachedPlanningTarget);

void BM_CheckCapabilitiesOneBackend(benchmark::State& state) {
  const auto cfg = llama_layer();
  const auto desc = attn::Registry::instance().find("reference");
  const attn::Platform& p = attn::detect_cpu();
  for (auto _ : state) benchmark::DoNotOptimize(attn::check_capabilities(desc->caps, cfg, p));
}
BENCHMARK(BM_CheckCapabilitiesOneBackend);

void BM_DecisionToJson(benchmark::State& state) {
  const auto d = attn::select(llama_layer(), no_env());
  for (auto _ : state) benchmark::DoNotOptimize(d.to_json());
}
BENCHMARK(BM_DecisionToJson);

}  // namespace

BENCHMARK_MAIN();
