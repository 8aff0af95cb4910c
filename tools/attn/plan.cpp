// Grouping a model's layers and selecting a backend per group; rendering the plan.
#include "plan.hpp"

#include <cstdio>
#include <sstream>

#include "attn/checked.hpp"
#include "attn/error.hpp"
#include "attn/limits.hpp"
#include "attn/platform.hpp"
#include "attn/mamba.hpp"
#include "attn/registry.hpp"
#include "run_memory.hpp"

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

/// One rank's cache per layer of the group: KV bytes per token of the chosen backend's cache
/// spec, or a mixer's float32 state bytes per sequence.
void size_caches(LayerGroup& g) {
  if (!g.is_attention()) {
    const attn::MixerConfig mc = attn::MixerConfig::from_dims(g.sample.mixer, g.sample.mixer_dims);
    g.state_bytes_per_sequence = mixer_state_bytes(mc, 1);
    return;
  }
  if (g.decision.backend.empty() || g.sample.attention.is_attention_free) return;
  const auto backend = attn::Registry::instance().find(g.decision.backend);
  if (!backend) return;
  const int32_t block = g.decision.block_size;
  g.kv_bytes_per_token = backend->cache_spec(g.sample.attention, 1, block).bytes() / block;
  g.slow_reference = backend->oracle;
}

/// "2 of 32 heads, 1 of 8 KV heads per rank (each KV head replicated on 2 ranks)".
std::string describe_sharding(const LayerGroup& g) {
  const attn::HeadSharding& s = g.sharding;
  const attn::LayerConfig& whole = g.whole.attention;
  std::ostringstream o;
  o << s.num_heads << " of " << whole.num_heads << " heads, ";
  if (whole.use_mla) o << "the latent cache (one entry per token) on every rank";
  else {
    o << s.num_kv_heads << " of " << whole.num_kv_heads << " KV heads per rank";
    if (s.kv_head_replicas > 1) o << " (each KV head replicated on " << s.kv_head_replicas << " ranks)";
  }
  return o.str();
}

/// "rank r: heads a-b, KV heads c-d" for the first two ranks and the last.
std::string rank_heads(const LayerGroup& g) {
  const attn::HeadSharding& s = g.sharding;
  auto span = [](int first, int n) { return n == 1 ? std::to_string(first) : std::to_string(first) + "-" + std::to_string(first + n - 1); };
  std::string out;
  for (int r = 0; r < s.tensor_parallel; ++r) {
    if (r == 2 && s.tensor_parallel > 3) {
      out += "; ...", r = s.tensor_parallel - 2;
      continue;
    }
    out += std::string(r ? "; " : "") + "rank " + std::to_string(r) + ": heads " + span(s.first_head(r), s.num_heads);
    if (!g.whole.attention.use_mla) out += ", KV " + std::string(s.num_kv_heads == 1 ? "head " : "heads ") + span(s.first_kv_head(r), s.num_kv_heads);
  }
  return out;
}

std::string stage_line(const Plan& plan, std::size_t i) {
  const attn::LayerRange& st = plan.stages[i];
  const int tp = plan.parallel.tensor, first = int(i) * tp;
  std::ostringstream o;
  o << "  stage " << i << ": layers " << st.begin << "-" << st.end - 1 << ", ranks " << first;
  if (tp > 1) o << "-" << first + tp - 1;
  o << ": " << attn::format_bytes(uint64_t(plan.kv_bytes_per_token(st.begin, st.end))) << " of KV cache per token per rank\n";
  return o.str();
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

int64_t Plan::kv_bytes_per_token(int begin, int end) const {
  int64_t bytes = 0;
  for (const auto& g : groups) {
    for (int i : g.layers) bytes += i >= begin && i < end ? g.kv_bytes_per_token : 0;
  }
  return bytes;
}

Parallelism parallelism(int64_t tensor_parallel, int64_t pipeline_parallel, const attn::ModelSpec& model) {
  Parallelism p;
  p.tensor = int(attn::check_range("--tensor-parallel", tensor_parallel, 1, attn::limits::kMaxHeads, "ranks"));
  p.pipeline = int(attn::check_range("--pipeline-parallel", pipeline_parallel, 1, model.num_layers,
                                     "stages: at most one per layer of " + model.name));
  return p;
}

Plan build_plan(const attn::ModelSpec& model, const attn::SelectOptions& options, Parallelism parallel) {
  Plan plan;
  plan.model = model;
  plan.parallel = parallel;
  plan.rank_model = attn::shard_model(model, parallel.tensor);
  plan.stages = attn::pipeline_stages(model.num_layers, parallel.pipeline);
  plan.platform = options.platform ? options.platform->to_string() : attn::detect_cpu().to_string();
  for (const auto& layer : model.layers) {
    LayerGroup* group = nullptr;
    for (auto& g : plan.groups) {
      if (same_group(g.whole, layer)) group = &g;
    }
    if (!group) {
      plan.groups.push_back(LayerGroup{});
      group = &plan.groups.back();
      group->whole = layer;
      group->sample = plan.rank_model.layers[std::size_t(layer.index)];
      if (layer.kind == attn::LayerKind::attention) group->sharding = attn::shard_heads(layer.attention, parallel.tensor);
    }
    group->layers.push_back(layer.index);
  }
  for (auto& g : plan.groups) {
    if (!g.is_attention()) {
      select_mixer(g, options);
      size_caches(g);
      continue;
    }
    try {
      g.decision = attn::explain(g.sample.attention, options);
    } catch (const attn::Error& e) {
      throw attn::Error("layers " + compact_layers(g.layers) + ": " + e.what());
    }
    g.has_decision = true;
    if (g.decision.backend.empty()) g.error = "no backend can serve layers " + compact_layers(g.layers);
    size_caches(g);
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
         {"platform", plan.platform}, {"tensor_parallel", plan.parallel.tensor}, {"pipeline_parallel", plan.parallel.pipeline},
         {"groups", json::array()}, {"stages", json::array()}};
  for (std::size_t i = 0; i < plan.stages.size(); ++i) {
    const attn::LayerRange& st = plan.stages[i];
    j["stages"].push_back({{"stage", i}, {"layers", {st.begin, st.end}},
                           {"ranks", {int(i) * plan.parallel.tensor, (int(i) + 1) * plan.parallel.tensor}},
                           {"kv_bytes_per_token_per_rank", plan.kv_bytes_per_token(st.begin, st.end)}});
  }
  for (const auto& g : plan.groups) {
    json gj{{"layers", g.layers}, {"kind", g.is_attention() ? "attention" : "mixer"}, {"backend", g.backend()}};
    if (g.is_attention()) {
      gj["config"] = json::parse(attn::layer_config_json(g.sample.attention));
      gj["softmax_scale"] = g.sample.softmax_scale;
      gj["kv_bytes_per_token"] = g.kv_bytes_per_token;
      gj["slow_reference_path"] = g.slow_reference;
      const attn::HeadSharding& sh = g.sharding;
      gj["sharding"] = {{"num_heads", sh.num_heads}, {"num_kv_heads", sh.num_kv_heads}, {"kv_head_replicas", sh.kv_head_replicas},
                        {"total_num_heads", g.whole.attention.num_heads}, {"total_num_kv_heads", g.whole.attention.num_kv_heads}};
    } else {
      gj["mixer"] = std::string(attn::to_string(g.sample.mixer));
      gj["config"] = g.sample.mixer_dims;
      gj["state_bytes_per_sequence"] = g.state_bytes_per_sequence;
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
  if (plan.parallel.any()) {
    s << "tensor parallel " << plan.parallel.tensor << " x pipeline parallel " << plan.parallel.pipeline << " = "
      << plan.parallel.tensor * plan.parallel.pipeline << " ranks; every layer below is one tensor-parallel rank's share, "
      << "the same shape on every rank\n";
    for (std::size_t i = 0; i < plan.stages.size(); ++i) s << stage_line(plan, i);
  }
  for (const auto& g : plan.groups) {
    s << "\nlayers " << compact_layers(g.layers) << " (" << g.layers.size() << " " << (g.is_attention() ? "attention" : "mixer")
      << "): " << (g.backend().empty() ? "NO BACKEND" : g.backend());
    if (g.has_decision && !g.decision.variant.empty()) s << " [" << g.decision.variant << "]";
    if (g.has_decision && g.is_attention() && !g.decision.backend.empty()) s << ", block size " << g.decision.block_size;
    if (g.has_decision && !g.decision.forced_by.empty()) s << " (forced by " << g.decision.forced_by << ")";
    if (g.slow_reference) s << "  <- slow reference path";
    if (!g.has_decision) s << " (mixer selection not available in this build)";
    s << "\n  " << describe_layer(g.sample) << "\n";
    const bool sharded = plan.parallel.tensor > 1;
    if (g.is_attention() && sharded && !g.sample.attention.is_attention_free) {
      s << "  per rank: " << describe_sharding(g) << "\n  " << rank_heads(g) << "\n";
    }
    if (g.kv_bytes_per_token) {
      s << "  KV cache: " << attn::format_bytes(uint64_t(g.kv_bytes_per_token)) << " per token per layer" << (sharded ? " per rank" : "") << "\n";
    }
    if (g.state_bytes_per_sequence) {
      s << "  state: " << attn::format_bytes(uint64_t(g.state_bytes_per_sequence)) << " per sequence per layer" << (sharded ? " per rank" : "")
        << "\n";
    }
    if (!g.has_decision || !candidates) continue;
    if (!g.decision.slow_path.empty()) s << "  slow reference path: " << g.decision.slow_path << "\n";
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
