// `attn bench` per-step overhead: one 32-layer decode step of Llama-3.1-8B attention (32 heads,
// 8 KV heads, head 128, bf16) on cpu_flash, run two ways on the same layers and caches:
//   forward  — the one-call path per layer: validate + plan + run, scratch allocated per call;
//   planned  — plan once for the step, run every layer under it with one workspace.
// The part of a step outside the kernels is the planning (metadata validation included): 32
// plans per step on the first path, one on the second. Each layer has its own cache; the layers
// rotate over enough distinct caches that a step reads at least the DRAM pool (attn_bench::choose_pool),
// so the kernels run at DRAM speed as in serving. Steps of the two paths alternate and each
// figure is the median of its steps.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
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

constexpr int kLayers = 32;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// The 32 layers of one decode step: their implementations, the distinct caches they rotate
/// over, the step's metadata (one block table for every layer: one KV-cache group) and q / out.
class DecodeStep {
 public:
  DecodeStep(int batch, int context, int threads, std::size_t pool_bytes) {
    using namespace attn;
    LayerParams p;
    p.config.num_heads = 32, p.config.num_kv_heads = 8, p.config.head_size = 128;
    p.config.dtype = DType::bfloat16;
    p.num_threads = threads;
    for (int l = 0; l < kLayers; ++l) layers_.push_back(Layer::on_backend("cpu_flash", p));
    const int bs = layers_[0].block_size(), blocks_per_seq = (context + 1 + bs - 1) / bs;
    const KVCacheSpec spec = layers_[0].cache_spec(blocks_per_seq * batch);
    // Bytes one layer's kernel reads: every cached token's K and V rows of every KV head.
    const double read = double(context + 1) * batch * p.config.num_kv_heads * 2.0 * p.config.head_size * 2.0;
    const int distinct = std::clamp(int(std::ceil(double(pool_bytes) / read)), 2, kLayers);
    for (int i = 0; i < distinct; ++i) {
      caches_.push_back(std::make_unique<KVCache>(spec));
      caches_.back()->fill(0.03f);  // values do not change the speed
    }
    std::vector<int32_t> blocks(std::size_t(blocks_per_seq) * batch);
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), std::mt19937(7));  // paged order, as after a long serving run
    std::vector<SequenceSpec> seqs;
    for (int b = 0; b < batch; ++b)
      seqs.push_back({context, 1, std::vector<int32_t>(blocks.begin() + b * blocks_per_seq, blocks.begin() + (b + 1) * blocks_per_seq)});
    md_ = BatchMetadata::build(seqs, bs, spec.num_blocks, true);
    q_ = Buffer(DType::bfloat16, {batch, 32, 128});
    out_ = Buffer(DType::bfloat16, {batch, 32, 128});
    for (int64_t i = 0; i < q_.view().numel(); ++i) store_from_float(q_.data(), DType::bfloat16, i, 0.01f * float(i % 97));
  }

  /// One step the one-call way: forward (validate + plan + run) per layer.
  double forward_step() {
    const auto t0 = Clock::now();
    for (int l = 0; l < kLayers; ++l) layers_[l].impl().forward(q_.view(), next_cache(), md_, out_.view());
    return since(t0);
  }

  /// One step planned once: plan, then run every layer with one workspace.
  double planned_step() {
    const auto t0 = Clock::now();
    const auto plan = layers_[0].plan(md_, caches_[0]->spec());
    ws_.reserve(plan->workspace_bytes());
    attn::ForwardArgs args;
    args.q = q_.view(), args.out = out_.view(), args.workspace = &ws_;
    for (int l = 0; l < kLayers; ++l) {
      args.cache = &next_cache();
      layers_[l].run(*plan, args);
    }
    return since(t0);
  }

  /// One plan(): metadata validation and work planning, the part of a step outside the kernels.
  double plan_once() const {
    const auto t0 = Clock::now();
    const auto plan = layers_[0].plan(md_, caches_[0]->spec());
    return since(t0);
  }

  int distinct_caches() const { return int(caches_.size()); }

 private:
  attn::KVCache& next_cache() { return *caches_[next_++ % caches_.size()]; }

  std::vector<attn::Layer> layers_;
  std::vector<std::unique_ptr<attn::KVCache>> caches_;
  attn::BatchMetadata md_;
  attn::Buffer q_, out_;
  attn::Workspace ws_;
  std::size_t next_ = 0;
};

void add_shape(std::vector<NamedFigure>& out, int batch, int context, bool quick, int threads) {
  const std::string name = "step_llama8b_32layers_decode_b" + std::to_string(batch) + "_ctx" + std::to_string(context);
  DecodeStep step(batch, context, threads, attn_bench::choose_pool(quick).bytes);
  const int reps = quick ? 1 : 9;  // quick: the CI smoke, one timed step per path
  step.forward_step(), step.planned_step();  // warm-up: OpenMP team, per-thread kernel scratch, workspace
  std::vector<double> fwd, planned, plan;
  for (int r = 0; r < reps; ++r) {  // alternating, so load changes hit both paths alike
    fwd.push_back(step.forward_step());
    planned.push_back(step.planned_step());
  }
  for (int r = 0; r < 4 * reps; ++r) plan.push_back(step.plan_once());
  const double f = median(fwd), p = median(planned), one_plan = median(plan);
  const std::string note = std::to_string(step.distinct_caches()) + " distinct caches rotated; median of " + std::to_string(reps) + " steps";
  out.push_back({name + ".forward_ms", f * 1e3, "ms", "forward per layer (validate + plan + run); " + note});
  out.push_back({name + ".planned_ms", p * 1e3, "ms", "plan once, run per layer; " + note});
  out.push_back({name + ".plan_us", one_plan * 1e6, "us", "one plan(): metadata validation + work planning"});
  out.push_back({name + ".forward_outside_kernels_fraction", kLayers * one_plan / f, "fraction", "32 plans / forward step"});
  out.push_back({name + ".planned_outside_kernels_fraction", one_plan / p, "fraction", "1 plan / planned step (target <= 0.02)"});
  out.push_back({name + ".planned_speedup", f / p, "x", "forward step / planned step"});
}

}  // namespace

std::vector<NamedFigure> step_overhead_figures(bool quick, int threads) {
  std::vector<NamedFigure> out;
  add_shape(out, 64, 32, quick, threads);    // tiny: overhead dominates
  add_shape(out, 8, 4096, quick, threads);   // bandwidth-bound: the target shape
  return out;
}

}  // namespace attn_cli
