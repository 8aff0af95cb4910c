// mixer_bench_figures: the numbers `attn bench` reports for the mixers — decode as state bytes
// read + written per second (against DRAM bandwidth), and the chunked prefill's speed-up over the
// sequential recurrence on the same backend.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "attn/mamba.hpp"

namespace attn {
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
  const std::size_t a = c.type == MambaType::mamba1 ? std::size_t(c.d_inner) * c.d_state
                        : c.type == MambaType::short_conv ? 0 : std::size_t(c.num_heads);
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
  switch (c.type) {
    case MambaType::mamba1:
      in.x = r->add({T, c.d_inner}, rng);
      in.dt = r->add({T, c.d_inner}, rng);
      in.B = r->add({T, c.d_state}, rng);
      in.C = r->add({T, c.d_state}, rng);
      break;
    case MambaType::mamba2:
      in.x = r->add({T, c.conv_dim()}, rng);
      in.dt = r->add({T, c.num_heads}, rng);
      break;
    case MambaType::short_conv: in.x = r->add({T, 3 * c.d_inner}, rng); break;
    case MambaType::linear_attention:
      in.x = r->add({T, c.num_heads, c.head_k_dim}, rng);
      in.k = r->add({T, c.num_heads, c.head_k_dim}, rng);
      in.v = r->add({T, c.num_heads, c.head_v_dim}, rng);
      break;
    case MambaType::gdn_attention:
      in.x = r->add({T, c.conv_dim()}, rng);
      in.dt = r->add({T, c.num_heads}, rng);
      in.b = r->add({T, c.num_heads}, rng);
      break;
    case MambaType::custom: break;
  }
  return r;
}

std::vector<int64_t> out_shape(const MixerConfig& c, int64_t T) {
  if (c.type == MambaType::linear_attention || c.type == MambaType::gdn_attention) return {T, c.num_heads, c.head_v_dim};
  return {T, c.out_dim()};
}

// Best of `reps` timed runs after one warm-up, in seconds.
double best_seconds(int reps, const std::function<void()>& run) {
  run();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

std::vector<std::pair<std::string, double>> mixer_bench_figures(bool quick, double dram_gbps) {
  std::vector<std::pair<std::string, double>> figures;
  std::mt19937 rng(1234);
  const int batch = quick ? 8 : 32;
  const int reps = quick ? 5 : 20;
  for (const Layer& layer : layers()) {
    const MixerConfig& c = layer.config;
    const std::string backend = select_mamba(c.type, MambaSelectOptions{"", false, std::nullopt}).backend;
    // Decode: one token for each of `batch` sequences, each continuing its own slot.
    {
      MixerParams p = params_for(c, rng);
      auto impl = create_mixer(backend, p);
      MambaStateCache cache(c, batch);
      std::vector<int32_t> lens(batch, 1), slots(batch);
      for (int i = 0; i < batch; ++i) slots[i] = i;
      const MixerBatch md = MixerBatch::build(lens, slots, std::vector<uint8_t>(batch, 1), batch);
      auto in = inputs_for(c, batch, rng);
      std::vector<float> out(std::size_t(batch) * c.out_dim());
      const TensorView ov = TensorView::contiguous(out.data(), DType::float32, out_shape(c, batch));
      const double s = best_seconds(reps, [&] { impl->forward(in->in, cache, md, ov); });
      const double bytes = 2.0 * double(cache.bytes());  // every slot's state read and written once
      const std::string key = std::string("decode.") + layer.name;
      figures.emplace_back(key + ".us_per_step", s * 1e6);
      figures.emplace_back(key + ".state_GBps", bytes / s / 1e9);
      if (dram_gbps > 0) figures.emplace_back(key + ".fraction_of_dram", bytes / s / 1e9 / dram_gbps);
    }
    // Prefill: the chunked form against the sequential recurrence, one long sequence.
    if (c.type == MambaType::mamba2 || c.type == MambaType::linear_attention || c.type == MambaType::gdn_attention) {
      const int64_t T = quick ? 256 : 1024;
      auto in = inputs_for(c, T, rng);
      std::vector<float> out(std::size_t(T) * c.out_dim());
      const TensorView ov = TensorView::contiguous(out.data(), DType::float32, out_shape(c, T));
      const MixerBatch md = MixerBatch::build({int32_t(T)}, {0}, {0}, 1);
      MixerParams p = params_for(c, rng);
      double secs[2];
      for (int chunked = 0; chunked < 2; ++chunked) {
        p.chunk_size = chunked ? 64 : 0;
        auto impl = create_mixer(backend, p);
        MambaStateCache cache(c, 1);
        secs[chunked] = best_seconds(quick ? 2 : 5, [&] { impl->forward(in->in, cache, md, ov); });
      }
      const std::string key = std::string("prefill.") + layer.name;
      figures.emplace_back(key + ".chunked_tokens_per_s", double(T) / secs[1]);
      figures.emplace_back(key + ".sequential_tokens_per_s", double(T) / secs[0]);
      figures.emplace_back(key + ".chunked_speedup", secs[0] / secs[1]);
    }
  }
  return figures;
}

}  // namespace attn
