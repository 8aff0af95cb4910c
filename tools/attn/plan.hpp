#pragma once
// A model's plan: its layers grouped by identical configuration, each group with the selector's
// Decision (attention) or the mixer selection (Mamba-family layers). Shared by `plan` and `run`.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "attn/model.hpp"
#include "attn/selector.hpp"
#include "commands.hpp"

namespace attn_cli {

struct LayerGroup {
  std::vector<int> layers;     // model layer indices, ascending
  attn::ModelLayer sample;     // the first layer (every layer of the group is configured like it)
  attn::Decision decision;     // the selector's answer (attention) or select_mamba's (mixers)
  bool has_decision = false;
  std::string error;           // set when no backend can serve the group (decision has the reasons)

  bool is_attention() const { return sample.kind == attn::LayerKind::attention; }
  std::string backend() const;  // chosen backend (the mixer type when no decision was made)
};

struct Plan {
  attn::ModelSpec model;
  std::string platform;
  std::vector<LayerGroup> groups;
  bool all_served() const;
};

attn::ModelSpec load_model(const ModelOptions& options);
attn::SelectOptions select_options(const ModelOptions& options);

/// Groups the model's layers and asks the selector for each group. A forced backend that cannot
/// serve a group throws (the selector's message has its reasons and the alternatives, prefixed
/// with the layers); a group no backend serves is kept with `error` set.
Plan build_plan(const attn::ModelSpec& model, const attn::SelectOptions& options);

/// "0-31", "0,2,4,...,46", "3,7,11" — compact, exact.
std::string compact_layers(const std::vector<int>& layers);
/// One line describing a layer's attention or mixer configuration.
std::string describe_layer(const attn::ModelLayer& layer);

/// {"model":..,"platform":..,"groups":[{"layers":[..],"config":{..},"backend":..,"candidates":[..]}]}
nlohmann::json plan_json(const Plan& plan);
/// The plan as text; `candidates` adds every other backend with its reasons.
std::string plan_text(const Plan& plan, bool candidates = true);

}  // namespace attn_cli
