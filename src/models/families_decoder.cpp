// Decoder-only attention families: Llama / Mistral / Qwen2 / Qwen3 / Phi-3 (GQA, optional
// sliding window), Gemma 2 / 3 (local/global alternation, soft-cap), gpt-oss (sinks, alternating
// window), Phi-3-small (block-sparse with periodic dense layers), and BERT-like encoders.
#include <algorithm>
#include <cmath>
#include <limits>

#include "models/families.hpp"
#include "models/layer_types.hpp"

namespace attn::models {
namespace {

const std::vector<std::string> kWindowTypes = {"full_attention", "sliding_attention"};

void add_windowed_layers(const ConfigReader& cfg, const LayerConfig& layer, const std::vector<std::string>& types,
                         float scale, std::vector<ModelLayer>& out) {
  for (int i = 0; i < int(types.size()); ++i) {
    LayerConfig c = layer;
    if (types[i] == "sliding_attention") c.sliding_window = cfg.integer("sliding_window");
    out.push_back(attention_layer(i, c, scale));
  }
}

/// Gemma's scale: query_pre_attn_scalar^-1/2 (equal to 1/sqrt(head_dim) only when they match).
float query_pre_attn_scale(const ConfigReader& cfg) {
  if (!cfg.has("query_pre_attn_scalar")) return 0.0f;
  double s = cfg.number("query_pre_attn_scalar");
  if (!(s > 0)) cfg.fail("query_pre_attn_scalar", ConfigReader::shown(s), "> 0");
  // The scale is s^-1/2: s past ~1e76 gives a scale no float holds (0 would mean "the default").
  const double scale = 1.0 / std::sqrt(s);
  if (!(scale >= double(std::numeric_limits<float>::min()) && scale <= double(std::numeric_limits<float>::max())))
    cfg.fail("query_pre_attn_scalar", ConfigReader::shown(s), "a value in [8.7e-77, 7.2e75] (its scale 1/sqrt(value) must be a normal float)");
  return float(scale);
}

}  // namespace

void parse_dense_decoder(const ConfigReader& cfg, const LayerConfig& base, std::vector<ModelLayer>& out) {
  const int n = cfg.num_layers();
  const LayerConfig layer = gqa_layer(cfg, base);
  const std::string type = cfg.string_or("model_type", "");
  const bool qwen = type.rfind("qwen", 0) == 0 || cfg.architecture().rfind("Qwen", 0) == 0;
  auto rule = [&](int i) -> std::string {
    if (!cfg.has("sliding_window") || cfg.integer("sliding_window") == 0) return "full_attention";
    // Qwen2/3 keep sliding_window in every config but use it only with use_sliding_window,
    // and then only from layer max_window_layers on (transformers' Qwen2 rule).
    if (qwen) {
      bool on = cfg.boolean_or("use_sliding_window", false) && i >= cfg.integer_or("max_window_layers", 0);
      return on ? "sliding_attention" : "full_attention";
    }
    return "sliding_attention";  // Mistral / Phi-3: a set window applies to every layer
  };
  add_windowed_layers(cfg, layer, layer_types(cfg, n, kWindowTypes, rule), 0.0f, out);
}

void parse_gemma(const ConfigReader& cfg, const LayerConfig& base, std::vector<ModelLayer>& out) {
  const int n = cfg.num_layers();
  LayerConfig layer = gqa_layer(cfg, base);
  layer.logits_soft_cap = cfg.to_float("attn_logit_softcapping", cfg.number_or("attn_logit_softcapping", 0.0));
  const bool gemma3 = cfg.architecture().find("Gemma3") != std::string::npos ||
                      cfg.string_or("model_type", "").rfind("gemma3", 0) == 0;
  // Gemma 2: even layers local, odd global. Gemma 3: every sliding_window_pattern-th layer
  // global (transformers' default pattern is 6).
  const int pattern = gemma3 ? cfg.integer_or("sliding_window_pattern", 6) : 2;
  if (pattern <= 0) cfg.fail("sliding_window_pattern", std::to_string(pattern), "> 0");
  auto rule = [&](int i) -> std::string { return (i + 1) % pattern == 0 ? "full_attention" : "sliding_attention"; };
  add_windowed_layers(cfg, layer, layer_types(cfg, n, kWindowTypes, rule), query_pre_attn_scale(cfg), out);
}

void parse_gpt_oss(const ConfigReader& cfg, const LayerConfig& base, std::vector<ModelLayer>& out) {
  const int n = cfg.num_layers();
  LayerConfig layer = gqa_layer(cfg, base);
  // Sinks are learned per-head weights in every gpt-oss attention layer; no config field.
  layer.has_sink = true;
  auto rule = [](int i) -> std::string { return i % 2 == 0 ? "sliding_attention" : "full_attention"; };
  add_windowed_layers(cfg, layer, layer_types(cfg, n, kWindowTypes, rule), 0.0f, out);
}

void parse_phi3_small(const ConfigReader& cfg, const LayerConfig& base, std::vector<ModelLayer>& out) {
  const int n = cfg.num_layers();
  const LayerConfig dense = gqa_layer(cfg, base);
  LayerConfig sparse = dense;
  sparse.use_block_sparse = true;
  sparse.bs_block_size = cfg.integer("blocksparse_block_size");
  sparse.bs_local_blocks = cfg.integer("blocksparse_num_local_blocks");
  sparse.bs_vert_stride = cfg.integer("blocksparse_vert_stride");
  // Heterogeneous heads (vLLM get_head_sliding_step): head h's vertical columns shift by h * step.
  if (!cfg.boolean_or("blocksparse_homo_head_pattern", true))
    sparse.bs_head_sliding_step = std::max(1, sparse.bs_vert_stride / std::max(1, dense.num_heads));
  const int every = cfg.integer_or("dense_attention_every_n_layers", 0);
  // muP attention scales by 1/d instead of 1/sqrt(d) (vLLM phi3_small: head_dim / mup_attn_multiplier).
  float scale = 0.0f;
  if (cfg.boolean_or("mup_use_scaling", false)) {
    if (dense.head_size <= 0) cfg.fail("head_dim", std::to_string(dense.head_size), "> 0 (muP scales by 1/head_dim)");
    scale = cfg.to_float("mup_attn_multiplier", cfg.number_or("mup_attn_multiplier", 1.0) / dense.head_size);
  }
  for (int i = 0; i < n; ++i) {
    bool is_dense = every > 0 && (i + 1) % every == 0;
    out.push_back(attention_layer(i, is_dense ? dense : sparse, scale));
  }
}

void parse_bert(const ConfigReader& cfg, const LayerConfig& base, std::vector<ModelLayer>& out) {
  const int n = cfg.num_layers();
  LayerConfig layer = gqa_layer(cfg, base);
  layer.attn_type = AttnType::encoder_only;  // bidirectional, no KV cache across steps
  for (int i = 0; i < n; ++i) out.push_back(attention_layer(i, layer));
}

}  // namespace attn::models
