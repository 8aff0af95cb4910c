#pragma once
/// Model configs: Hugging Face config.json → per-layer configs (attention or mixer).
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "attn/layer_config.hpp"

namespace attn {

enum class LayerKind : uint8_t { attention, mixer };
inline constexpr LayerKind kLastLayerKind = LayerKind::mixer;  // the name table is checked against it
std::string_view to_string(LayerKind k);  // "attention" / "mixer"

struct ModelLayer {
  int index = 0;
  LayerKind kind = LayerKind::attention;
  LayerConfig attention;                 // kind == attention (also attention-free placeholder)
  MambaType mixer = MambaType::mamba1;   // kind == mixer
  std::map<std::string, double> mixer_dims;  // d_inner, d_state, d_conv, n_groups, ... (mixer-specific)
  /// Softmax scale the model uses (query_pre_attn_scalar, MLA's qk dims, muP); 0 → 1/sqrt(head_size).
  float softmax_scale = 0.0f;
};

struct ModelSpec {
  std::string name;            // built-in name or path
  std::string architecture;    // architectures[0] / model_type
  int hidden_size = 0;
  int num_layers = 0;
  std::vector<ModelLayer> layers;
  std::string config_json;     // the raw config, for backends that need more fields
};

/// Overrides a user gives on the command line.
struct ModelOverrides {
  std::optional<DType> dtype;
  std::optional<KVCacheDType> kv_cache_dtype;
  int block_size = 0;          // 0 = unset
};

/// Loads a built-in model by name (models/<name>.json) or a config.json path.
/// Unknown architectures / missing fields → attn::Error naming what is missing.
ModelSpec load_model(const std::string& name_or_path, const ModelOverrides& overrides = {});
ModelSpec parse_model_config(const std::string& json_text, const std::string& name, const ModelOverrides& overrides = {});
/// Names of the shipped configs.
std::vector<std::string> builtin_models();
/// The model `attn run` uses with no arguments.
std::string default_model();

}  // namespace attn
