// mixer_bench_figures: the numbers `attn bench` reports for the mixers — decode as state bytes
// read + written per second (against DRAM bandwidth, states rotated over the DRAM pool of
// attn_bench::dram_pool_bytes), and the chunked prefill's speed-up over the sequential
// recurrence on the same backend at 2048 tokens (the two interleaved, medians).
#include "testkit/mixer_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>

#include "attn/mamba.hpp"
#include "testkit/bench_kit.hpp"

namespace attn::testkit {
namespace {

struct Layer {
  const char* name;
  MixerConfig config;
};

// Realistic layer shapes: mamba-130m, Mamba-2 (2.7b-like head layout), LFM2-1.2B's short conv,
// MiniMax-Text-01's lightning attention, Qwen3-Next's gated delta net.
std::vector<Layer> layers() {
  return {
      {"mamba1", MixerConfig::from_dims(MambaType::mamba1, {{"d_inner", 1536}, {"d_state", 16}, {"d_conv", 4}})},
      {"mamba2", MixerConfig::from_dims(MambaType::mamba2, {{"num_heads", 80}, {"head_dim", 64}, {"d_state", 128},
                                                            {"n_groups", 1}, {"d_conv", 4}})},
      {"short_conv", MixerConfig::from_dims(MambaType::short_conv, {{"d_inner", 2048}, {"d_conv", 3}})},
      {"linear", MixerConfig::from_dims(MambaType::linear_attention, {{"num_heads", 64}, {"head_k_dim", 96}, {"head_v_dim", 96}})},
      {"gdn", MixerConfig::from_dims(MambaType::gdn_attention, {{"num_heads", 32}, {"num_k_heads", 16},
                                                                {"head_k_dim", 128}, {"head_v_dim", 128}, {"d_conv", 4}})},
  };
}

std::vector<float> uniform(std::size_t n, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

MixerParams params_for(const MixerConfig& c, std::mt19937& rng) {
  MixerParams p;
  p.config = c;
  if (c.conv_dim() > 0) p.conv_weight = uniform(std::size_t(c.conv_dim()) * c.d_conv, rng, -0.5f, 0.5f);
  std::size_t a = 0;
  for (const MixerTypeInfo::Weight& w : mixer_type_info(c.type).weights)
    if (w.field == &MixerParams::A) a = std::size_t(w.size(c));
  p.A = uniform(a, rng, -1.0f, -0.05f);
  return p;
}

// Owning per-token inputs shaped for the layer type.
struct Inputs {
  std::vector<std::vector<float>> store;
  MixerInputs in;
  TensorView add(std::vector<int64_t> shape, std::mt19937& rng) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    store.push_back(uniform(std::size_t(n), rng, -1.0f, 1.0f));
    return TensorView::contiguous(store.back().data(), DType::float32, shape);
  }
};

std::unique_ptr<Inputs> inputs_for(const MixerConfig& c, int64_t T, std::mt19937& rng) {
  auto r = std::make_unique<Inputs>();
  r->store.reserve(8);
  MixerInputs& in = r->in;
  // The required inputs of an unconvolved step, uniform in [-1, 1].
  for (const MixerTypeInfo::Input& spec : mixer_type_info(c.type).inputs)
    if (!spec.optional && spec.when != MixerTypeInfo::Input::When::convolved) in.*spec.field = r->add(spec.shape(c).after(T), rng);
  return r;
}

// Median of `reps` timed runs of run(rep) after one warm-up (medians, not minima: on a shared
// machine the best run says more about the neighbours than about the kernel).
double median_seconds(int reps, const std::function<void(int)>& run) {
  run(reps);
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run(i);
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

std::vector<std::pair<std::string, double>> mixer_bench_figures(bool quick, double dram_rw_gbps) {
  std::vector<std::pair<std::string, double>> figures;
  std::mt19937 rng(1234);
  const int batch = quick ? 8 : 32;
  const int reps = quick ? 5 : 20;
  const double pool_bytes = double(attn_bench::dram_pool_bytes());
  for (const Layer& layer : layers()) {
    const MixerConfig& c = layer.config;
    const std::string backend = select_mamba(c.type, MambaSelectOptions{"", false, std::nullopt, nullptr}).backend;
    // Decode: one token for each of `batch` sequences, each continuing its own slot. Successive
    // runs take the next `batch` slots of the DRAM pool (dram_pool_bytes), so every run reads
    // its states from DRAM as a serving engine does, not from the cache the previous run warmed.
    {
      MixerParams p = params_for(c, rng);
      auto impl = create_mixer(backend, p);
      const double slot_bytes = double(MambaStateCache(c, 1).bytes());
      const int groups = std::max(2, int(std::ceil(pool_bytes / (slot_bytes * batch))));
      MambaStateCache cache(c, batch * groups);
      // Every page written once before timing: a page first touched inside a run is zeroed by the
      // kernel just then and read back from the cache, which made the decode figures cache figures.
      cache.fill(0.0f);
      // Planned once outside the timed region, as an engine plans once per step for all layers.
      std::vector<std::shared_ptr<const MixerPlan>> plans;
      for (int g = 0; g < groups; ++g) {
        std::vector<int32_t> lens(batch, 1), slots(batch);
        for (int i = 0; i < batch; ++i) slots[i] = g * batch + i;
        plans.push_back(impl->plan(MixerBatch::build(lens, slots, std::vector<uint8_t>(batch, 1), batch * groups), batch * groups));
      }
      auto in = inputs_for(c, batch, rng);
      std::vector<float> out(std::size_t(batch) * c.out_dim());
      Workspace ws;
      const MixerArgs args{in->in, &cache, TensorView::contiguous(out.data(), DType::float32, c.out_shape(batch)), &ws};
      const double s = median_seconds(reps, [&](int rep) { impl->run(*plans[rep % groups], args); });
      const double bytes = 2.0 * slot_bytes * batch;  // every used slot's state read and written once
      const std::string key = std::string("decode.") + layer.name;
      figures.emplace_back(key + ".us_per_step", s * 1e6);
      figures.emplace_back(key + ".state_GBps", bytes / s / 1e9);
      if (dram_rw_gbps > 0) figures.emplace_back(key + ".fraction_of_dram_read_write", bytes / s / 1e9 / dram_rw_gbps);
    }
    // Prefill: the chunked form against the sequential recurrence, one long sequence; the two
    // run interleaved (one of each per round) so both see the same machine load.
    if (c.has_chunked_form()) {
      const int64_t T = quick ? 256 : 2048;
      auto in = inputs_for(c, T, rng);
      std::vector<float> out(std::size_t(T) * c.out_dim());
      const MixerBatch md = MixerBatch::build({int32_t(T)}, {0}, {0}, 1);
      MixerParams p = params_for(c, rng);
      std::unique_ptr<MixerImpl> impl[2];
      for (int chunked = 0; chunked < 2; ++chunked) {
        p.chunk_size = chunked ? MixerParams{}.chunk_size : 0;
        impl[chunked] = create_mixer(backend, p);
      }
      MambaStateCache cache(c, 1);
      Workspace ws;
      const MixerArgs args{in->in, &cache, TensorView::contiguous(out.data(), DType::float32, c.out_shape(T)), &ws};
      const std::shared_ptr<const MixerPlan> plan[2] = {impl[0]->plan(md, 1), impl[1]->plan(md, 1)};
      const int rounds = quick ? 3 : 7;
      std::vector<double> secs[2];
      for (int r = -1; r < rounds; ++r) {  // round -1 warms up
        for (int chunked = 0; chunked < 2; ++chunked) {
          const auto t0 = std::chrono::steady_clock::now();
          impl[chunked]->run(*plan[chunked], args);
          const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          if (r >= 0) secs[chunked].push_back(dt);
        }
      }
      for (auto& v : secs) std::sort(v.begin(), v.end());
      const double seq = secs[0][rounds / 2], chk = secs[1][rounds / 2];
      const std::string key = std::string("prefill.") + layer.name;
      figures.emplace_back(key + ".chunked_tokens_per_s", double(T) / chk);
      figures.emplace_back(key + ".sequential_tokens_per_s", double(T) / seq);
      figures.emplace_back(key + ".chunked_speedup", seq / chk);
    }
  }
  return figures;
}

}  // namespace attn::testkit
