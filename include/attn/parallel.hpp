#pragma once
/// Tensor- and pipeline-parallel shares of a model, by vLLM's rules: each tensor-parallel rank
/// holds num_heads / N query heads; KV heads are split when there are at least N of them and
/// replicated when there are fewer (each rank holds one, N / num_kv_heads ranks per head); an
/// MLA layer's latent cache is one entry per token that every rank holds; mixers split their
/// heads and channels. Pipeline stages hold contiguous layer ranges.
#include <vector>

#include "attn/model.hpp"

namespace attn {

/// How one attention layer's heads spread over `tensor_parallel` ranks. Every rank's share has
/// the same shape; only the global heads it holds differ.
struct HeadSharding {
  int tensor_parallel = 1;
  int num_heads = 0;         // query heads per rank
  int num_kv_heads = 0;      // KV heads per rank
  int kv_head_replicas = 1;  // ranks holding each KV head (1: KV heads are split, not copied)

  /// The rank's global query heads are [first_head(rank), first_head(rank) + num_heads).
  int first_head(int rank) const { return rank * num_heads; }
  /// The rank's global KV heads are [first_kv_head(rank), first_kv_head(rank) + num_kv_heads).
  int first_kv_head(int rank) const { return rank / kv_head_replicas * num_kv_heads; }
};

/// The sharding of `config` over `tensor_parallel` ranks (vLLM's QKVParallelLinear): heads must
/// divide by the rank count, and KV heads by it (split) or it by them (replicated); otherwise
/// attn::Error names tensor_parallel, its value and what would divide.
HeadSharding shard_heads(const LayerConfig& config, int tensor_parallel);
/// One rank's config of an attention layer.
LayerConfig shard_layer_config(const LayerConfig& config, int tensor_parallel);
/// One rank's share of a layer: attention as above; mixers split d_inner, num_heads and
/// num_k_heads, and Mamba-2's groups (a single group is replicated, as vLLM does).
ModelLayer shard_layer(const ModelLayer& layer, int tensor_parallel);
/// One rank's share of every layer; errors name the layer.
ModelSpec shard_model(const ModelSpec& model, int tensor_parallel);

/// The layers [begin, end) one pipeline stage holds.
struct LayerRange {
  int begin = 0, end = 0;
};
/// vLLM's get_pp_indices: num_layers / P layers per stage, the remainder one each to the stages
/// just before the last (the last also holds the output head). P above num_layers → attn::Error.
std::vector<LayerRange> pipeline_stages(int num_layers, int pipeline_parallel);

}  // namespace attn
