// The family table and the helpers every family parser shares.
#include "models/families.hpp"

namespace attn::models {

const std::vector<Family>& families() {
  static const std::vector<Family> table = {
      {"dense decoder", {"LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Phi3ForCausalLM",
                         "Qwen2ForCausalLM", "Qwen2MoeForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM"},
       {"llama", "mistral", "mixtral", "phi3", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe"}, parse_dense_decoder},
      {"gemma", {"Gemma2ForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"},
       {"gemma2", "gemma3", "gemma3_text"}, parse_gemma},
      {"gpt-oss", {"GptOssForCausalLM"}, {"gpt_oss"}, parse_gpt_oss},
      {"phi3-small", {"Phi3SmallForCausalLM"}, {"phi3small"}, parse_phi3_small},
      {"bert-like encoder", {"BertModel", "BertForMaskedLM", "BertForSequenceClassification", "RobertaModel",
                             "RobertaForMaskedLM", "XLMRobertaModel", "XLMRobertaForMaskedLM"},
       {"bert", "roberta", "xlm-roberta"}, parse_bert},
      {"deepseek mla", {"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM"},
       {"deepseek_v2", "deepseek_v3", "deepseek_v32"}, parse_deepseek},
      {"mamba", {"MambaForCausalLM", "FalconMambaForCausalLM"}, {"mamba", "falcon_mamba"}, parse_mamba},
      {"mamba2", {"Mamba2ForCausalLM"}, {"mamba2"}, parse_mamba2},
      {"jamba", {"JambaForCausalLM"}, {"jamba"}, parse_jamba},
      {"qwen3-next", {"Qwen3NextForCausalLM"}, {"qwen3_next"}, parse_qwen3_next},
      {"lfm2", {"Lfm2ForCausalLM"}, {"lfm2"}, parse_lfm2},
  };
  return table;
}

LayerConfig gqa_layer(const ConfigReader& cfg, const LayerConfig& base) {
  LayerConfig c = base;
  c.num_heads = cfg.integer("num_attention_heads");
  c.num_kv_heads = cfg.integer_or("num_key_value_heads", c.num_heads);
  c.head_size = cfg.head_dim();
  if (c.num_heads <= 0) cfg.fail("num_attention_heads", std::to_string(c.num_heads), "> 0");
  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0) {
    cfg.fail("num_key_value_heads", std::to_string(c.num_kv_heads),
             "a divisor of num_attention_heads (" + std::to_string(c.num_heads) + ")");
  }
  return c;
}

ModelLayer attention_layer(int index, const LayerConfig& config, float softmax_scale) {
  ModelLayer l;
  l.index = index;
  l.kind = LayerKind::attention;
  l.attention = config;
  l.softmax_scale = softmax_scale;
  return l;
}

ModelLayer mixer_layer(int index, MambaType type, std::map<std::string, double> dims) {
  ModelLayer l;
  l.index = index;
  l.kind = LayerKind::mixer;
  l.mixer = type;
  l.mixer_dims = std::move(dims);
  // A mixer layer needs no KV cache; its attention slot says so for anyone who selects on it.
  l.attention.is_attention_free = true;
  return l;
}

}  // namespace attn::models
