#pragma once
// A model's plan: its layers grouped by identical configuration, each group with the selector's
// Decision (attention) or the mixer selection (Mamba-family layers). Shared by `plan` and `run`.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "attn/model.hpp"
#include "attn/parallel.hpp"
#include "attn/selector.hpp"
#include "commands.hpp"

namespace attn_cli {

struct LayerGroup {
  std::vector<int> layers;     // model layer indices, ascending
  attn::ModelLayer sample;     // one rank's share of the first layer (the whole layer at tensor parallel 1)
  attn::ModelLayer whole;      // the first layer before sharding
  attn::HeadSharding sharding; // attention: how the heads spread over the ranks
  attn::Decision decision;     // the selector's answer (attention) or select_mamba's (mixers)
  bool has_decision = false;
  bool slow_reference = false; // served by the correctness oracle (BackendDescriptor::oracle)
  std::string error;           // set when no backend can serve the group (decision has the reasons)
  /// One rank's cache per layer: KV bytes per token (attention, once a backend is chosen) or
  /// state bytes per sequence (mixers).
  int64_t kv_bytes_per_token = 0, state_bytes_per_sequence = 0;

  bool is_attention() const { return sample.kind == attn::LayerKind::attention; }
  std::string backend() const;  // chosen backend (the mixer type when no decision was made)
};

/// How the model is spread over machines: tensor-parallel ranks split every layer's heads,
/// pipeline stages hold contiguous layer ranges.
struct Parallelism {
  int tensor = 1, pipeline = 1;
  bool any() const { return tensor > 1 || pipeline > 1; }
};

struct Plan {
  attn::ModelSpec model;       // the whole model
  attn::ModelSpec rank_model;  // one tensor-parallel rank's share of every layer
  Parallelism parallel;
  std::vector<attn::LayerRange> stages;  // pipeline stages, in order
  std::string platform;
  std::vector<LayerGroup> groups;
  bool all_served() const;
  /// One rank's KV-cache bytes per token over the layers [begin, end).
  int64_t kv_bytes_per_token(int begin, int end) const;
};

attn::ModelSpec load_model(const ModelOptions& options);
attn::SelectOptions select_options(const ModelOptions& options);

/// Checked --tensor-parallel / --pipeline-parallel values.
Parallelism parallelism(int64_t tensor_parallel, int64_t pipeline_parallel, const attn::ModelSpec& model);

/// Groups the model's layers, shards them for `parallel.tensor` ranks and asks the selector for
/// each group's share. A forced backend that cannot serve a group throws (the selector's message
/// has its reasons and the alternatives, prefixed with the layers); a group no backend serves is
/// kept with `error` set.
Plan build_plan(const attn::ModelSpec& model, const attn::SelectOptions& options, Parallelism parallel = {});

/// "0-31", "0,2,4,...,46", "3,7,11" — compact, exact.
std::string compact_layers(const std::vector<int>& layers);
/// One line describing a layer's attention or mixer configuration.
std::string describe_layer(const attn::ModelLayer& layer);

/// {"model":..,"platform":..,"groups":[{"layers":[..],"config":{..},"backend":..,"candidates":[..]}]}
nlohmann::json plan_json(const Plan& plan);
/// The plan as text; `candidates` adds every other backend with its reasons.
std::string plan_text(const Plan& plan, bool candidates = true);

}  // namespace attn_cli
