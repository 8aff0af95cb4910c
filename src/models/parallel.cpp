// Tensor-parallel head sharding and pipeline-parallel layer ranges (include/attn/parallel.hpp),
// following vLLM's QKVParallelLinear, MambaMixer2 and get_pp_indices.
#include "attn/parallel.hpp"

#include <cmath>
#include <string>

#include "attn/checked.hpp"
#include "attn/error.hpp"
#include "attn/limits.hpp"
#include "attn/mamba.hpp"

namespace attn {
namespace {

int check_ranks(int tensor_parallel) {
  return int(check_range("tensor_parallel", tensor_parallel, 1, limits::kMaxHeads, "ranks (at most one query head each)"));
}

/// `count` / tp, or attn::Error naming tensor_parallel and the field it must divide.
int divide(int count, int tp, const std::string& field, const std::string& context = "") {
  require(count % tp == 0, "tensor_parallel", tp, "a divisor of " + field + "=" + std::to_string(count) + context);
  return count / tp;
}

}  // namespace

HeadSharding shard_heads(const LayerConfig& c, int tensor_parallel) {
  const int tp = check_ranks(tensor_parallel);
  HeadSharding s;
  s.tensor_parallel = tp;
  if (c.is_attention_free) {  // no heads: every rank holds the (empty) layer
    s.num_heads = c.num_heads, s.num_kv_heads = c.num_kv_heads;
    return s;
  }
  s.num_heads = divide(c.num_heads, tp, "num_heads");
  if (c.use_mla || tp >= c.num_kv_heads) {
    // Fewer KV heads than ranks (MLA's one latent entry included): each rank holds one copy.
    require(c.use_mla || tp % c.num_kv_heads == 0, "tensor_parallel", tp,
            "a multiple of num_kv_heads=" + std::to_string(c.num_kv_heads) + " (each KV head replicated on the same number of ranks)");
    s.num_kv_heads = 1;
    s.kv_head_replicas = c.use_mla ? tp : tp / c.num_kv_heads;
  } else {
    s.num_kv_heads = divide(c.num_kv_heads, tp, "num_kv_heads");
  }
  return s;
}

LayerConfig shard_layer_config(const LayerConfig& c, int tensor_parallel) {
  const HeadSharding s = shard_heads(c, tensor_parallel);
  LayerConfig out = c;
  out.num_heads = s.num_heads;
  out.num_kv_heads = s.num_kv_heads;
  return out;
}

ModelLayer shard_layer(const ModelLayer& layer, int tensor_parallel) {
  ModelLayer out = layer;
  if (layer.kind == LayerKind::attention) {
    out.attention = shard_layer_config(layer.attention, tensor_parallel);
    return out;
  }
  const int tp = check_ranks(tensor_parallel);
  const std::string mixer = " (" + std::string(to_string(layer.mixer)) + " mixer)";
  for (const char* key : {"d_inner", "num_heads", "num_k_heads"}) {
    auto it = out.mixer_dims.find(key);
    if (it != out.mixer_dims.end()) it->second = divide(int(std::lround(it->second)), tp, key, mixer);
  }
  if (auto it = out.mixer_dims.find("n_groups"); it != out.mixer_dims.end()) {
    const int groups = int(std::lround(it->second));
    if (groups != 1) it->second = divide(groups, tp, "n_groups", mixer + ", or a single group, replicated on every rank");
  }
  return out;
}

ModelSpec shard_model(const ModelSpec& model, int tensor_parallel) {
  ModelSpec out = model;
  for (auto& l : out.layers) {
    try {
      l = shard_layer(l, tensor_parallel);
    } catch (const Error& e) {
      throw Error("layer " + std::to_string(l.index) + " of " + model.name + ": " + e.what());
    }
  }
  return out;
}

std::vector<LayerRange> pipeline_stages(int num_layers, int pipeline_parallel) {
  check_range("num_layers", num_layers, 1, limits::kMaxLayers, "layers of one model");
  const int pp = int(check_range("pipeline_parallel", pipeline_parallel, 1, num_layers,
                                 "stages (at most one per layer: the model has " + std::to_string(num_layers) + ")"));
  std::vector<int> sizes(std::size_t(pp), num_layers / pp);
  for (int i = 0; i < num_layers % pp; ++i) ++sizes[std::size_t(pp - 2 - i)];  // stages before the last
  std::vector<LayerRange> out;
  int begin = 0;
  for (int n : sizes) out.push_back({begin, begin + n}), begin += n;
  return out;
}

}  // namespace attn
