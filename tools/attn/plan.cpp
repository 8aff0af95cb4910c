// Grouping a model's layers and selecting a backend per group; rendering the plan.
#include "plan.hpp"

#include <cstdio>
#include <sstream>

#include "attn/checked.hpp"
#include "attn/error.hpp"
#include "attn/limits.hpp"
#include "attn/platform.hpp"
#include "attn/mamba.hpp"

namespace attn_cli {
namespace {

using nlohmann::json;

bool same_group(const attn::ModelLayer& a, const attn::ModelLayer& b) {
  if (a.kind != b.kind) return false;
  if (a.kind == attn::LayerKind::attention) return a.attention == b.attention && a.softmax_scale == b.softmax_scale;
  return a.mixer == b.mixer && a.mixer_dims == b.mixer_dims;
}

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

/// Mixer layers: select_mamba (a deterministic type → backend mapping, ATTN_MAMBA_BACKEND aside).
void select_mixer(LayerGroup& g, const attn::SelectOptions& options) {
  attn::MambaSelectOptions m;
  m.platform = options.platform;
  g.decision = attn::select_mamba(g.sample.mixer, m);
  g.has_decision = true;
}

json candidates_json(const attn::Decision& d) {
  json out = json::array();
  for (const auto& c : d.candidates) {
    json cj{{"backend", c.backend}, {"valid", c.valid}, {"priority", c.priority}, {"reasons", json::array()}};
    for (const auto& r : c.reasons) cj["reasons"].push_back({{"field", r.field}, {"value", r.value}, {"expected", r.expected}});
    out.push_back(cj);
  }
  return out;
}

}  // namespace

std::string LayerGroup::backend() const {
  if (has_decision) return decision.backend;
  return std::string(attn::to_string(sample.mixer));
}

bool Plan::all_served() const {
  for (const auto& g : groups) {
    if (!g.error.empty()) return false;
  }
  return true;
}

attn::ModelSpec load_model(const ModelOptions& o) {
  attn::ModelOverrides ov;
  if (!o.dtype.empty()) ov.dtype = attn::parse_dtype(o.dtype);
  if (!o.kv_cache_dtype.empty()) ov.kv_cache_dtype = attn::parse_kv_cache_dtype(o.kv_cache_dtype);
  if (o.block_size) ov.block_size = attn::check_block_size("--block-size", *o.block_size);
  attn::ModelSpec spec = attn::load_model(o.model.empty() ? attn::default_model() : o.model, ov);
  attn::check_range("num_hidden_layers", spec.num_layers, 1, attn::limits::kMaxLayers, "layers of one model");
  return spec;
}

attn::SelectOptions select_options(const ModelOptions& o) {
  attn::SelectOptions s;
  s.backend = o.backend;
  if (!o.platform.empty()) s.platform = attn::parse_platform(o.platform);
  return s;
}

Plan build_plan(const attn::ModelSpec& model, const attn::SelectOptions& options) {
  Plan plan;
  plan.model = model;
  plan.platform = options.platform ? options.platform->to_string() : attn::detect_cpu().to_string();
  for (const auto& layer : model.layers) {
    LayerGroup* group = nullptr;
    for (auto& g : plan.groups) {
      if (same_group(g.sample, layer)) group = &g;
    }
    if (!group) {
      plan.groups.push_back(LayerGroup{});
      group = &plan.groups.back();
      group->sample = layer;
    }
    group->layers.push_back(layer.index);
  }
  for (auto& g : plan.groups) {
    if (!g.is_attention()) {
      select_mixer(g, options);
      continue;
    }
    try {
      g.decision = attn::explain(g.sample.attention, options);
    } catch (const attn::Error& e) {
      throw attn::Error("layers " + compact_layers(g.layers) + ": " + e.what());
    }
    g.has_decision = true;
    if (g.decision.backend.empty()) g.error = "no backend can serve layers " + compact_layers(g.layers);
  }
  return plan;
}

std::string compact_layers(const std::vector<int>& v) {
  if (v.empty()) return "";
  const size_t n = v.size();
  if (n >= 4) {
    int step = v[1] - v[0];
    bool progression = step > 1;
    for (size_t i = 2; i < n && progression; ++i) progression = v[i] - v[i - 1] == step;
    if (progression) {
      return std::to_string(v[0]) + "," + std::to_string(v[1]) + "," + std::to_string(v[2]) + ",...," +
             std::to_string(v[n - 1]);
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

std::string describe_layer(const attn::ModelLayer& l) {
  std::ostringstream s;
  if (l.kind == attn::LayerKind::mixer) {
    s << attn::to_string(l.mixer) << " mixer:";
    for (const auto& [k, v] : l.mixer_dims) s << " " << k << "=" << number(v);
    return s.str();
  }
  const attn::LayerConfig& c = l.attention;
  s << c.num_heads << " heads / " << c.num_kv_heads << " kv, head " << c.head_size;
  if (c.head_size_v && c.head_size_v != c.head_size) s << "/" << c.head_size_v;
  s << ", " << attn::to_string(c.dtype) << ", kv " << attn::to_string(c.kv_cache_dtype);
  if (c.attn_type != attn::AttnType::decoder) s << ", " << attn::to_string(c.attn_type);
  if (c.use_mla) s << ", MLA (latent " << c.kv_lora_rank << " + rope " << c.qk_rope_head_dim << ")";
  if (c.use_sparse) s << ", top-" << c.index_topk << " sparse";
  if (c.use_block_sparse) {
    s << ", block-sparse (block " << c.bs_block_size << ", local " << c.bs_local_blocks << ", vert stride "
      << c.bs_vert_stride << (c.bs_head_sliding_step ? ", per-head columns step " + std::to_string(c.bs_head_sliding_step) : "")
      << ")";
  }
  if (c.sliding_window) s << ", window " << c.sliding_window;
  if (c.logits_soft_cap) s << ", soft-cap " << number(c.logits_soft_cap);
  if (c.has_sink) s << ", sinks";
  if (c.use_alibi) s << ", alibi";
  if (l.softmax_scale) s << ", scale " << number(l.softmax_scale);
  return s.str();
}

json plan_json(const Plan& plan) {
  json j{{"model", plan.model.name}, {"architecture", plan.model.architecture}, {"num_layers", plan.model.num_layers},
         {"platform", plan.platform}, {"groups", json::array()}};
  for (const auto& g : plan.groups) {
    json gj{{"layers", g.layers}, {"kind", g.is_attention() ? "attention" : "mixer"}, {"backend", g.backend()}};
    if (g.is_attention()) {
      gj["config"] = json::parse(attn::layer_config_json(g.sample.attention));
      gj["softmax_scale"] = g.sample.softmax_scale;
    } else {
      gj["mixer"] = std::string(attn::to_string(g.sample.mixer));
      gj["config"] = g.sample.mixer_dims;
    }
    gj["candidates"] = g.has_decision ? candidates_json(g.decision) : json::array();
    if (g.has_decision) {
      gj["variant"] = g.decision.variant;
      if (g.is_attention()) gj["block_size"] = g.decision.block_size;
      gj["notes"] = g.decision.notes;
      if (!g.decision.forced_by.empty()) gj["forced_by"] = g.decision.forced_by;
    }
    if (!g.error.empty()) gj["error"] = g.error;
    j["groups"].push_back(gj);
  }
  return j;
}

std::string plan_text(const Plan& plan, bool candidates) {
  std::ostringstream s;
  s << "model " << plan.model.name << " (" << plan.model.architecture << "), " << plan.model.num_layers << " layers\n";
  s << "platform " << plan.platform << "\n";
  for (const auto& g : plan.groups) {
    s << "\nlayers " << compact_layers(g.layers) << " (" << g.layers.size() << " " << (g.is_attention() ? "attention" : "mixer")
      << "): " << (g.backend().empty() ? "NO BACKEND" : g.backend());
    if (g.has_decision && !g.decision.variant.empty()) s << " [" << g.decision.variant << "]";
    if (g.has_decision && g.is_attention() && !g.decision.backend.empty()) s << ", block size " << g.decision.block_size;
    if (g.has_decision && !g.decision.forced_by.empty()) s << " (forced by " << g.decision.forced_by << ")";
    if (!g.has_decision) s << " (mixer selection not available in this build)";
    s << "\n  " << describe_layer(g.sample) << "\n";
    if (!g.has_decision || !candidates) continue;
    for (const auto& note : g.decision.notes) s << "  note: " << note << "\n";
    for (const auto& c : g.decision.candidates) {
      char head[96];
      std::snprintf(head, sizeof head, "    %-16s priority %-5d ", c.backend.c_str(), c.priority);
      s << head;
      if (c.backend == g.decision.backend) s << "chosen";
      else if (c.valid) s << "valid, not chosen";
      else {
        for (size_t i = 0; i < c.reasons.size(); ++i) s << (i ? "; " : "") << c.reasons[i].to_string();
      }
      s << "\n";
    }
  }
  return s.str();
}

}  // namespace attn_cli
