#pragma once
/// A model's plan: its layers grouped by identical configuration, one decision per group (the
/// selector for attention layers, select_mamba for mixers) for one tensor-parallel rank's share
/// on a platform, and the pipeline stages. `attn plan`, `attn run` and attn.plan() all read it.
#include <string>
#include <vector>

#include "attn/model.hpp"
#include "attn/parallel.hpp"
#include "attn/selector.hpp"

namespace attn {

struct PlanOptions {
  SelectOptions select;        // forced backend and the like; its platform is plan_model's argument
  int tensor_parallel = 1;     // plan one rank's share of every layer (heads split as vLLM splits them)
  int pipeline_parallel = 1;   // stages of contiguous layers
};

/// Layers of one configuration and the decision that serves them all.
struct PlanGroup {
  std::vector<int> layers;     // model layer indices, ascending
  std::string layer_ranges;    // layer_ranges(layers): "0-31", "0,2,4,...,46"
  ModelLayer whole;            // the first layer, before sharding
  ModelLayer sample;           // one rank's share of it (the whole layer at tensor parallel 1)
  HeadSharding sharding;       // attention: how its heads spread over the ranks
  Decision decision;           // explain() for attention, select_mamba() for mixers
  std::string error;           // set when no backend serves the group (the candidates say why)
  bool is_attention() const { return whole.kind == LayerKind::attention; }
};

struct ModelPlan {
  ModelSpec model;             // the whole model
  ModelSpec rank_model;        // one tensor-parallel rank's share of every layer
  std::string platform;        // Platform::to_string()
  int tensor_parallel = 1, pipeline_parallel = 1;
  std::vector<LayerRange> stages;  // pipeline stages, in order
  std::vector<PlanGroup> groups;   // in order of first layer
  bool all_served() const;
  /// The group holding `layer`; attn::Error when no group does.
  const PlanGroup& group_of(int layer) const;
};

/// Groups equal layers, shards them for `options.tensor_parallel` ranks and decides each group
/// on `platform`. A forced backend that cannot serve a group throws attn::Error (the selector's
/// message, prefixed "layers <ranges> of <model>: "); a group nothing serves is kept
/// with `error` set. Bad tensor / pipeline counts throw naming the value.
ModelPlan plan_model(const ModelSpec& model, const Platform& platform, const PlanOptions& options = {});

/// "0-31", "0,2,4,...,46" (four or more in steps above 1), "3,7,11", "1-3,5": compact and exact.
std::string layer_ranges(const std::vector<int>& layers);

/// {"model","architecture","num_layers","platform","tensor_parallel","pipeline_parallel",
///  "stages":[{"stage","layers":[begin,end],"ranks":[first,end]}],
///  "groups":[{"layers":[..],"layer_ranges","kind","backend","config","candidates","variant","notes",
///  attention: "softmax_scale","block_size","sharding"; mixers: "mixer"; "forced_by","error" when set}]}
std::string to_json(const ModelPlan& plan);

}  // namespace attn
