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

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
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

}  // namespace

GroupSizes group_sizes(const LayerGroup& g) {
  GroupSizes out;
  if (!g.is_attention()) {
    out.state_bytes_per_sequence = mixer_state_bytes(attn::MixerConfig::from_dims(g.sample.mixer, g.sample.mixer_dims), 1);
    return out;
  }
  if (g.decision.backend.empty() || g.sample.attention.is_attention_free) return out;
  const auto backend = attn::Registry::instance().find(g.decision.backend);
  if (!backend) return out;
  const int32_t block = g.decision.block_size;
  out.kv_bytes_per_token = backend->cache_spec(g.sample.attention, 1, block).bytes() / block;
  out.slow_reference = backend->oracle;
  return out;
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
    const int64_t per_layer = group_sizes(g).kv_bytes_per_token;
    for (int i : g.layers) bytes += i >= begin && i < end ? per_layer : 0;
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
  attn::PlanOptions po;
  po.select = options;
  po.tensor_parallel = parallel.tensor;
  po.pipeline_parallel = parallel.pipeline;
  Plan plan;
  static_cast<attn::ModelPlan&>(plan) =
      attn::plan_model(model, options.platform ? *options.platform : attn::detect_cpu(), po);
  plan.parallel = parallel;
  return plan;
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
  json j = json::parse(attn::to_json(plan));
  for (std::size_t i = 0; i < plan.stages.size(); ++i)
    j["stages"][i]["kv_bytes_per_token_per_rank"] = plan.kv_bytes_per_token(plan.stages[i].begin, plan.stages[i].end);
  for (std::size_t i = 0; i < plan.groups.size(); ++i) {
    const GroupSizes sizes = group_sizes(plan.groups[i]);
    json& gj = j["groups"][i];
    if (plan.groups[i].is_attention()) {
      gj["kv_bytes_per_token"] = sizes.kv_bytes_per_token;
      gj["slow_reference_path"] = sizes.slow_reference;
    } else {
      gj["state_bytes_per_sequence"] = sizes.state_bytes_per_sequence;
    }
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
    const GroupSizes sizes = group_sizes(g);
    const std::string& backend = g.decision.backend;
    s << "\nlayers " << g.layer_ranges << " (" << g.layers.size() << " " << attn::to_string(g.whole.kind)
      << "): " << (backend.empty() ? "NO BACKEND" : backend);
    if (!g.decision.variant.empty()) s << " [" << g.decision.variant << "]";
    if (g.is_attention() && !backend.empty()) s << ", block size " << g.decision.block_size;
    if (!g.decision.forced_by.empty()) s << " (forced by " << g.decision.forced_by << ")";
    if (sizes.slow_reference) s << "  <- slow reference path";
    s << "\n  " << describe_layer(g.sample) << "\n";
    const bool sharded = plan.parallel.tensor > 1;
    if (g.is_attention() && sharded && !g.sample.attention.is_attention_free) {
      s << "  per rank: " << describe_sharding(g) << "\n  " << rank_heads(g) << "\n";
    }
    if (sizes.kv_bytes_per_token) {
      s << "  KV cache: " << attn::format_bytes(uint64_t(sizes.kv_bytes_per_token)) << " per token per layer" << (sharded ? " per rank" : "") << "\n";
    }
    if (sizes.state_bytes_per_sequence) {
      s << "  state: " << attn::format_bytes(uint64_t(sizes.state_bytes_per_sequence)) << " per sequence per layer" << (sharded ? " per rank" : "")
        << "\n";
    }
    if (!candidates) continue;
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
