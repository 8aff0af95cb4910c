#pragma once
// Architecture families: each turns one config.json into per-layer ModelLayers. The table in
// families.cpp maps `architectures[0]` / `model_type` to a family; nothing else names models.
#include <string_view>
#include <vector>

#include "attn/model.hpp"
#include "models/config_reader.hpp"

namespace attn::models {

/// `base` carries the precision fields (dtype, kv_cache_dtype, block_size) already resolved.
using FamilyParser = void (*)(const ConfigReader& cfg, const LayerConfig& base, std::vector<ModelLayer>& out);

struct Family {
  std::string_view name;
  std::vector<std::string_view> architectures;  // HF class names (architectures[0])
  std::vector<std::string_view> model_types;    // fallback when architectures is absent
  FamilyParser parse;
};

const std::vector<Family>& families();

// --- helpers shared by the family parsers ---
/// num_heads / num_kv_heads (default: num_heads, as transformers) / head_size from the config.
LayerConfig gqa_layer(const ConfigReader& cfg, const LayerConfig& base);
ModelLayer attention_layer(int index, const LayerConfig& config, float softmax_scale = 0.0f);
ModelLayer mixer_layer(int index, MambaType type, std::map<std::string, double> dims);

// --- the parsers (families_decoder.cpp, families_mla.cpp, families_mixer.cpp) ---
void parse_dense_decoder(const ConfigReader&, const LayerConfig&, std::vector<ModelLayer>&);
void parse_gemma(const ConfigReader&, const LayerConfig&, std::vector<ModelLayer>&);
void parse_gpt_oss(const ConfigReader&, const LayerConfig&, std::vector<ModelLayer>&);
void parse_phi3_small(const ConfigReader&, const LayerConfig&, std::vector<ModelLayer>&);
void parse_bert(const ConfigReader&, const LayerConfig&, std::vector<ModelLayer>&);
void parse_deepseek(const ConfigReader&, const LayerConfig&, std::vector<ModelLayer>&);
void parse_mamba(const ConfigReader&, const LayerConfig&, std::vector<ModelLayer>&);
void parse_mamba2(const ConfigReader&, const LayerConfig&, std::vector<ModelLayer>&);
void parse_jamba(const ConfigReader&, const LayerConfig&, std::vector<ModelLayer>&);
void parse_qwen3_next(const ConfigReader&, const LayerConfig&, std::vector<ModelLayer>&);
void parse_lfm2(const ConfigReader&, const LayerConfig&, std::vector<ModelLayer>&);

}  // namespace attn::models
