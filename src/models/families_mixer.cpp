// Attention-free and hybrid families: Mamba-1 / Mamba-2 (every layer a mixer), Jamba (Mamba-1
// with periodic attention), Qwen3-Next (Gated DeltaNet with every 4th layer attention) and LFM2
// (short convolutions with listed attention layers). mixer_dims use MixerConfig::from_dims's keys
// (attn/mamba.hpp), plus d_model / expand / dt_rank for information.
#include "models/families.hpp"
#include "models/layer_types.hpp"

namespace attn::models {
namespace {

double d(int x) { return double(x); }

/// d_inner = expand * hidden_size, formed in 64 bits (two 2^30 fields overflow int) and held to
/// the same 0..2^30 range as every config integer.
double inner(const ConfigReader& cfg, int expand, int hidden, const char* expand_field) {
  const int64_t p = int64_t(expand) * hidden;
  if (p > (int64_t(1) << 30)) {
    cfg.fail(expand_field, std::to_string(expand), "expand * hidden_size (" + std::to_string(hidden) + ") <= 2^30");
  }
  return double(p);
}

}  // namespace

void parse_mamba(const ConfigReader& cfg, const LayerConfig& base, std::vector<ModelLayer>& out) {
  const int n = cfg.num_layers();
  const int hidden = cfg.integer("hidden_size");
  const int expand = cfg.integer_or("expand", 2);
  std::map<std::string, double> dims = {
      {"d_model", d(hidden)},
      {"d_inner", cfg.has("intermediate_size") ? d(cfg.integer("intermediate_size")) : inner(cfg, expand, hidden, "expand")},
      {"d_state", d(cfg.integer("state_size"))},
      {"d_conv", d(cfg.integer("conv_kernel"))},
      {"expand", d(expand)},
  };
  if (cfg.has("time_step_rank")) dims["dt_rank"] = d(cfg.integer("time_step_rank"));
  for (int i = 0; i < n; ++i) out.push_back(mixer_layer(i, MambaType::mamba1, dims));
}

void parse_mamba2(const ConfigReader& cfg, const LayerConfig& base, std::vector<ModelLayer>& out) {
  const int n = cfg.num_layers();
  const int hidden = cfg.integer("hidden_size");
  const int expand = cfg.integer_or("expand", 2);
  std::map<std::string, double> dims = {
      {"d_model", d(hidden)},
      {"d_inner", inner(cfg, expand, hidden, "expand")},
      {"d_state", d(cfg.integer("state_size"))},
      {"d_conv", d(cfg.integer("conv_kernel"))},
      {"n_groups", d(cfg.integer_or("n_groups", 1))},
      {"num_heads", d(cfg.integer("num_heads"))},
      {"head_dim", d(cfg.integer("head_dim"))},
      {"expand", d(expand)},
  };
  for (int i = 0; i < n; ++i) out.push_back(mixer_layer(i, MambaType::mamba2, dims));
}

void parse_jamba(const ConfigReader& cfg, const LayerConfig& base, std::vector<ModelLayer>& out) {
  const int n = cfg.num_layers();
  const int hidden = cfg.integer("hidden_size");
  const int period = cfg.integer("attn_layer_period");
  const int offset = cfg.integer("attn_layer_offset");
  if (period <= 0) cfg.fail("attn_layer_period", std::to_string(period), "> 0");
  LayerConfig attn = gqa_layer(cfg, base);
  if (cfg.has("sliding_window")) attn.sliding_window = cfg.integer("sliding_window");
  const int expand = cfg.integer("mamba_expand");
  std::map<std::string, double> dims = {
      {"d_model", d(hidden)},
      {"d_inner", inner(cfg, expand, hidden, "mamba_expand")},
      {"d_state", d(cfg.integer("mamba_d_state"))},
      {"d_conv", d(cfg.integer("mamba_d_conv"))},
      {"expand", d(expand)},
  };
  if (cfg.has("mamba_dt_rank")) dims["dt_rank"] = d(cfg.integer("mamba_dt_rank"));
  for (int i = 0; i < n; ++i) {
    if (i % period == offset) out.push_back(attention_layer(i, attn));
    else out.push_back(mixer_layer(i, MambaType::mamba1, dims));
  }
}

void parse_qwen3_next(const ConfigReader& cfg, const LayerConfig& base, std::vector<ModelLayer>& out) {
  const int n = cfg.num_layers();
  const LayerConfig attn = gqa_layer(cfg, base);
  std::map<std::string, double> dims = {
      {"d_model", d(cfg.integer("hidden_size"))},
      {"num_k_heads", d(cfg.integer("linear_num_key_heads"))},
      {"num_heads", d(cfg.integer("linear_num_value_heads"))},  // value heads (MixerConfig::num_heads)
      {"head_k_dim", d(cfg.integer("linear_key_head_dim"))},
      {"head_v_dim", d(cfg.integer("linear_value_head_dim"))},
      {"d_conv", d(cfg.integer("linear_conv_kernel_dim"))},
  };
  const int interval = cfg.has("layer_types") ? 1 : cfg.integer("full_attention_interval");
  if (interval <= 0) cfg.fail("full_attention_interval", std::to_string(interval), "> 0");
  auto rule = [&](int i) -> std::string { return (i + 1) % interval == 0 ? "full_attention" : "linear_attention"; };
  auto types = layer_types(cfg, n, {"full_attention", "linear_attention"}, rule);
  for (int i = 0; i < n; ++i) {
    // Qwen3-Next's linear attention is Gated DeltaNet (vLLM's "gdn_attention" mamba type).
    if (types[i] == "full_attention") out.push_back(attention_layer(i, attn));
    else out.push_back(mixer_layer(i, MambaType::gdn_attention, dims));
  }
}

void parse_lfm2(const ConfigReader& cfg, const LayerConfig& base, std::vector<ModelLayer>& out) {
  const int n = cfg.num_layers();
  const LayerConfig attn = gqa_layer(cfg, base);
  std::map<std::string, double> dims = {
      {"d_inner", d(cfg.integer("hidden_size"))},  // the gated conv runs over the hidden size
      {"d_conv", d(cfg.integer("conv_L_cache"))},
  };
  std::vector<bool> is_attn(size_t(n), false);
  if (cfg.has("layer_types")) {
    auto types = layer_types(cfg, n, {"full_attention", "conv"}, nullptr);
    for (int i = 0; i < n; ++i) is_attn[size_t(i)] = types[size_t(i)] == "full_attention";
  } else {
    for (int i : cfg.integers("full_attn_idxs", kMaxLayers)) {
      if (i >= n) cfg.fail("full_attn_idxs", std::to_string(i), "layer indices below num_hidden_layers=" + std::to_string(n));
      is_attn[size_t(i)] = true;
    }
  }
  for (int i = 0; i < n; ++i) {
    if (is_attn[size_t(i)]) out.push_back(attention_layer(i, attn));
    else out.push_back(mixer_layer(i, MambaType::short_conv, dims));
  }
}

}  // namespace attn::models
