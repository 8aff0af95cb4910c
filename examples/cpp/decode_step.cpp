// One decode step of a Llama-3-8B layer through the installed attn package: attn::Layer selects
// the backend and builds it, the prompt's keys and values go into a paged cache, then the step is
// planned once per layer group and each layer runs under its plan (here one layer): write the new
// token's k, v, then attend.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <attn/attn.hpp>

int main() {
  attn::LayerConfig cfg;
  cfg.num_heads = 32, cfg.num_kv_heads = 8, cfg.head_size = 128, cfg.dtype = attn::DType::float32;
  attn::LayerParams params;
  params.config = cfg;
  const attn::Layer layer(params);  // the selector's choice and its implementation
  const int32_t block_size = layer.block_size();
  const int32_t context = 100, blocks = (context + 1 + block_size - 1) / block_size;
  attn::KVCache cache(layer.cache_spec(blocks));  // the layout and dtype the backend reads

  std::vector<int32_t> block_ids(blocks);
  for (int32_t b = 0; b < blocks; ++b) block_ids[b] = b;
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  auto random = [&](std::vector<int64_t> shape) {
    attn::Buffer buf(attn::DType::float32, shape);
    float* p = buf.view().ptr<float>();
    for (int64_t i = 0; i < buf.view().numel(); ++i) p[i] = normal(rng);
    return buf;
  };
  // The prompt's keys and values, then one decode step: its own k, v and its query.
  auto prompt = attn::BatchMetadata::build({{0, context, block_ids}}, block_size, blocks);
  attn::Buffer k = random({context, 8, 128}), v = random({context, 8, 128});
  layer.write_kv(k.view(), v.view(), cache, prompt);
  auto step = attn::BatchMetadata::build({{context, 1, block_ids}}, block_size, blocks);
  attn::Buffer k1 = random({1, 8, 128}), v1 = random({1, 8, 128}), q = random({1, 32, 128});
  attn::Buffer out(attn::DType::float32, {1, 32, 128});
  attn::StepPlans plans(step);                       // once per step: one plan per layer group
  const attn::StepPlan& plan = plans.for_layer(layer, cache.spec());
  attn::Workspace workspace(plans.workspace_bytes());  // caller-owned scratch, reused across layers and steps
  attn::ForwardArgs args;
  args.q = q.view(), args.out = out.view(), args.cache = &cache, args.workspace = &workspace;
  args.new_k = k1.view(), args.new_v = v1.view();    // written at the step's slots before attending
  const attn::RunResult ran = layer.run(plan, args);

  const float* o = out.view().ptr<float>();
  bool finite = true;
  for (int64_t i = 0; i < out.view().numel(); ++i) finite = finite && std::isfinite(o[i]);
  std::printf("backend %s [%.*s], block_size %d, out[0, 0, :4] = %.4f %.4f %.4f %.4f\n", layer.backend().c_str(),
              int(ran.variant.size()), ran.variant.data(), block_size, o[0], o[1], o[2], o[3]);
  return finite ? 0 : 1;
}
