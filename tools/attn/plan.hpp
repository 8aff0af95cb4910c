#pragma once
// A model's plan: its layers grouped by identical configuration, each group with the selector's
// Decision (attention) or the mixer selection (Mamba-family layers). Shared by `plan` and `run`.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "attn/model.hpp"
#include "attn/plan.hpp"
#include "commands.hpp"

namespace attn_cli {

/// One group of the library's plan (attn/plan.hpp): layers, their sample, sharding and decision.
using LayerGroup = attn::PlanGroup;

/// How the model is spread over machines: tensor-parallel ranks split every layer's heads,
/// pipeline stages hold contiguous layer ranges.
struct Parallelism {
  int tensor = 1, pipeline = 1;
  bool any() const { return tensor > 1 || pipeline > 1; }
};

/// One rank's cache per layer of a group: KV bytes per token of the chosen backend's cache spec
/// (attention), or a mixer's float32 state bytes per sequence.
struct GroupSizes {
  int64_t kv_bytes_per_token = 0, state_bytes_per_sequence = 0;
  bool slow_reference = false;  // served by the correctness oracle (BackendDescriptor::oracle)
};
GroupSizes group_sizes(const LayerGroup& group);

/// The library's plan (attn::plan_model) with the CLI's parallelism.
struct Plan : attn::ModelPlan {
  Parallelism parallel;
  /// One rank's KV-cache bytes per token over the layers [begin, end).
  int64_t kv_bytes_per_token(int begin, int end) const;
};

attn::ModelSpec load_model(const ModelOptions& options);
attn::SelectOptions select_options(const ModelOptions& options);

/// Checked --tensor-parallel / --pipeline-parallel values.
Parallelism parallelism(int64_t tensor_parallel, int64_t pipeline_parallel, const attn::ModelSpec& model);

/// attn::plan_model on the options' platform (this CPU by default); see there for errors.
Plan build_plan(const attn::ModelSpec& model, const attn::SelectOptions& options, Parallelism parallel = {});

/// One line describing a layer's attention or mixer configuration.
std::string describe_layer(const attn::ModelLayer& layer);

/// attn::to_json(plan) with each group's and stage's cache sizes.
nlohmann::json plan_json(const Plan& plan);
/// The plan as text; `candidates` adds every other backend with its reasons.
std::string plan_text(const Plan& plan, bool candidates = true);

}  // namespace attn_cli
