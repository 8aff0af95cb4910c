// DeepSeek V2 / V3 multi-head latent attention, and V3.2's top-k sparse attention on top of it.
// The cache holds one latent entry per token (kv_lora_rank + qk_rope_head_dim = 576 wide) shared
// by all heads, so the layer is MQA-shaped: num_kv_heads 1, head_size 576, head_size_v 512.
#include <cmath>

#include "models/families.hpp"

namespace attn::models {

void parse_deepseek(const ConfigReader& cfg, const LayerConfig& base, std::vector<ModelLayer>& out) {
  const int n = cfg.num_layers();
  LayerConfig c = base;
  c.use_mla = true;
  c.num_heads = cfg.integer("num_attention_heads");
  c.num_kv_heads = 1;
  c.kv_lora_rank = cfg.integer("kv_lora_rank");
  c.qk_rope_head_dim = cfg.integer("qk_rope_head_dim");
  c.qk_nope_head_dim = cfg.integer("qk_nope_head_dim");
  c.v_head_dim = cfg.integer("v_head_dim");
  // Each field is at most 2^30, so the sums are formed in 64 bits and bounded before use.
  const int64_t latent = int64_t(c.kv_lora_rank) + c.qk_rope_head_dim;
  if (latent > (int64_t(1) << 30)) cfg.fail("kv_lora_rank", std::to_string(c.kv_lora_rank), "kv_lora_rank + qk_rope_head_dim <= 2^30");
  const int64_t qk = int64_t(c.qk_nope_head_dim) + c.qk_rope_head_dim;
  if (qk <= 0) cfg.fail("qk_nope_head_dim", std::to_string(c.qk_nope_head_dim), "qk_nope_head_dim + qk_rope_head_dim > 0");
  c.head_size = int(latent);
  c.head_size_v = c.kv_lora_rank;
  const bool v32 = cfg.architecture() == "DeepseekV32ForCausalLM" || cfg.string_or("model_type", "") == "deepseek_v32";
  if (v32) {
    c.use_sparse = true;
    c.index_topk = cfg.integer("index_topk");
  }
  // Scores are q·k over the un-absorbed qk dims (nope + rope), whatever the latent width.
  // The yarn mscale correction of long-context configs is not applied here.
  const float scale = float(1.0 / std::sqrt(double(qk)));
  for (int i = 0; i < n; ++i) out.push_back(attention_layer(i, c, scale));
}

}  // namespace attn::models
