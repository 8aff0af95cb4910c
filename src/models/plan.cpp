// plan_model(): a model's layers grouped by configuration, one decision per group.
#include "attn/plan.hpp"

#include "attn/checked.hpp"
#include "attn/error.hpp"
#include "attn/limits.hpp"
#include "attn/mamba.hpp"
#include "select/json.hpp"

namespace attn {
namespace {

bool same_group(const ModelLayer& a, const ModelLayer& b) {
  if (a.kind != b.kind) return false;
  if (a.kind == LayerKind::attention) return a.attention == b.attention && a.softmax_scale == b.softmax_scale;
  return a.mixer == b.mixer && a.mixer_dims == b.mixer_dims;
}

void decide(PlanGroup& g, const ModelSpec& model, const Platform& platform, const SelectOptions& select) {
  try {
    if (g.is_attention()) {
      g.decision = explain(g.sample.attention, select);
    } else {
      MambaSelectOptions m;
      m.platform = platform;
      g.decision = explain_mamba(g.sample.mixer, m);
    }
  } catch (const Error& e) {
    throw Error("layers " + g.layer_ranges + " of " + model.name + ": " + e.what());
  }
  if (g.decision.backend.empty()) g.error = "no backend can serve layers " + g.layer_ranges;
}

}  // namespace

bool ModelPlan::all_served() const {
  for (const auto& g : groups)
    if (!g.error.empty()) return false;
  return true;
}

const PlanGroup& ModelPlan::group_of(int layer) const {
  for (const auto& g : groups)
    for (int i : g.layers)
      if (i == layer) return g;
  throw Error("layer=" + std::to_string(layer) + " invalid: expected a layer of " + model.name + " (0.." +
              std::to_string(model.num_layers - 1) + ")");
}

ModelPlan plan_model(const ModelSpec& model, const Platform& platform, const PlanOptions& options) {
  ModelPlan plan;
  plan.model = model;
  plan.platform = platform.to_string();
  plan.tensor_parallel = int(check_range("tensor_parallel", options.tensor_parallel, 1, limits::kMaxHeads, "ranks"));
  plan.pipeline_parallel = int(check_range("pipeline_parallel", options.pipeline_parallel, 1, model.num_layers,
                                           "stages: at most one per layer of " + model.name));
  plan.rank_model = shard_model(model, plan.tensor_parallel);
  plan.stages = pipeline_stages(model.num_layers, plan.pipeline_parallel);
  for (const auto& layer : model.layers) {
    PlanGroup* group = nullptr;
    for (auto& g : plan.groups)
      if (same_group(g.whole, layer)) group = &g;
    if (!group) {
      group = &plan.groups.emplace_back();
      group->whole = layer;
      group->sample = plan.rank_model.layers[std::size_t(layer.index)];
      if (layer.kind == LayerKind::attention) group->sharding = shard_heads(layer.attention, plan.tensor_parallel);
    }
    group->layers.push_back(layer.index);
  }
  SelectOptions select = options.select;
  select.platform = platform;
  for (auto& g : plan.groups) {
    g.layer_ranges = layer_ranges(g.layers);
    decide(g, model, platform, select);
  }
  return plan;
}

std::string layer_ranges(const std::vector<int>& v) {
  if (v.empty()) return "";
  const size_t n = v.size();
  if (n >= 4) {
    const int step = v[1] - v[0];
    bool progression = step > 1;
    for (size_t i = 2; i < n && progression; ++i) progression = v[i] - v[i - 1] == step;
    if (progression)
    {
      std::string out = std::to_string(v[0]);  // appended piece by piece: GCC 12's -Wrestrict misfires on "x" + temporary
      for (size_t i : {size_t(1), size_t(2)}) (out += ',') += std::to_string(v[i]);
      out += ",...,";
      out += std::to_string(v[n - 1]);
      return out;
    }
  }
  std::string out;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j + 1 < n && v[j + 1] == v[j] + 1) ++j;
    if (!out.empty()) out += ',';
    if (j - i >= 2) {
      out += std::to_string(v[i]);
      out += '-';
      out += std::to_string(v[j]);
    } else {
      for (size_t k = i; k <= j; ++k) {
        if (k > i) out += ',';
        out += std::to_string(v[k]);
      }
    }
    i = j + 1;
  }
  return out;
}

std::string to_json(const ModelPlan& plan) {
  using nlohmann::json;
  json j{{"model", plan.model.name}, {"architecture", plan.model.architecture}, {"num_layers", plan.model.num_layers},
         {"platform", plan.platform}, {"tensor_parallel", plan.tensor_parallel}, {"pipeline_parallel", plan.pipeline_parallel},
         {"groups", json::array()}, {"stages", json::array()}};
  for (std::size_t i = 0; i < plan.stages.size(); ++i) {
    const LayerRange& st = plan.stages[i];
    j["stages"].push_back({{"stage", i}, {"layers", {st.begin, st.end}},
                           {"ranks", {int(i) * plan.tensor_parallel, (int(i) + 1) * plan.tensor_parallel}}});
  }
  for (const auto& g : plan.groups) {
    const json decision = detail::json_of(g.decision);
    json gj{{"layers", g.layers}, {"layer_ranges", g.layer_ranges}, {"kind", std::string(to_string(g.whole.kind))},
            {"backend", g.decision.backend}, {"candidates", decision["candidates"]}, {"variant", g.decision.variant},
            {"notes", g.decision.notes}};
    if (g.is_attention()) {
      gj["config"] = decision["config"];
      gj["softmax_scale"] = g.sample.softmax_scale;
      gj["block_size"] = g.decision.block_size;
      const HeadSharding& sh = g.sharding;
      gj["sharding"] = {{"num_heads", sh.num_heads}, {"num_kv_heads", sh.num_kv_heads}, {"kv_head_replicas", sh.kv_head_replicas},
                        {"total_num_heads", g.whole.attention.num_heads}, {"total_num_kv_heads", g.whole.attention.num_kv_heads}};
    } else {
      gj["mixer"] = std::string(to_string(g.sample.mixer));
      gj["config"] = g.sample.mixer_dims;
    }
    if (!g.decision.forced_by.empty()) gj["forced_by"] = g.decision.forced_by;
    if (!g.error.empty()) gj["error"] = g.error;
    j["groups"].push_back(gj);
  }
  return j.dump();
}

}  // namespace attn
