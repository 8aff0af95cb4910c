// config.json → ModelSpec: picks the family from architectures[0] (or model_type), resolves the
// precision fields once, and lets the family lay out the layers.
#include <nlohmann/json.hpp>

#include "attn/error.hpp"
#include "attn/model.hpp"
#include "core/names.hpp"
#include "models/config_json.hpp"
#include "models/families.hpp"

namespace attn {

namespace {

constexpr detail::NameArray<LayerKind, 2> kLayerKindNames = {{{LayerKind::attention, "attention"}, {LayerKind::mixer, "mixer"}}};
static_assert(detail::covers_enum(kLayerKindNames, kLastLayerKind));

using nlohmann::json;

const models::Family* find_family(const std::string& architecture, const std::string& model_type) {
  for (const auto& f : models::families()) {
    for (auto a : f.architectures) if (a == architecture) return &f;
  }
  for (const auto& f : models::families()) {
    for (auto t : f.model_types) if (t == model_type) return &f;
  }
  return nullptr;
}

std::string known_architectures() {
  std::vector<std::string> names;
  for (const auto& f : models::families()) {
    for (auto a : f.architectures) names.emplace_back(a);
  }
  return join(names);
}

/// The model's dtype: torch_dtype (or the newer `dtype`) of the text config, then of the outer
/// config. Like vLLM's "auto", float32 checkpoints and configs without a dtype run in bfloat16.
DType config_dtype(const models::ConfigReader& text, const models::ConfigReader& top) {
  for (const auto* r : {&text, &top}) {
    for (const char* field : {"torch_dtype", "dtype"}) {
      if (!r->has(field)) continue;
      const std::string name = r->string_or(field, "");
      const std::string clipped = models::clip(name);
      DType d;
      try {
        d = parse_dtype(name);
      } catch (const Error&) {
        r->fail(field, "'" + clipped + "'", "float32, float16 or bfloat16");
      }
      if (d != DType::float32 && d != DType::float16 && d != DType::bfloat16) {
        r->fail(field, "'" + clipped + "'", "float32, float16 or bfloat16");
      }
      return d == DType::float32 ? DType::bfloat16 : d;
    }
  }
  return DType::bfloat16;
}

/// The layers of a model whose family is known; the precision fields are resolved once here.
ModelSpec build_spec(const models::ConfigReader& reader, const models::ConfigReader& top_reader, const models::Family& family,
                     const std::string& json_text, const ModelOverrides& overrides) {
  const std::string& name = reader.model();
  const std::string& label = reader.architecture();
  LayerConfig base;
  base.dtype = overrides.dtype ? *overrides.dtype : config_dtype(reader, top_reader);
  base.kv_cache_dtype = overrides.kv_cache_dtype.value_or(KVCacheDType::auto_);
  if (overrides.block_size < 0) throw Error("block_size=" + std::to_string(overrides.block_size) + " invalid: expected > 0");
  base.block_size = overrides.block_size;

  ModelSpec spec;
  spec.name = name;
  spec.architecture = label;
  spec.config_json = json_text;
  spec.hidden_size = reader.integer("hidden_size");
  family.parse(reader, base, spec.layers);
  spec.num_layers = int(spec.layers.size());
  if (spec.layers.empty()) reader.fail("num_hidden_layers", "0", "at least one layer");
  for (const auto& l : spec.layers) {
    if (l.kind != LayerKind::attention) continue;
    try {
      l.attention.validate();
    } catch (const Error& e) {
      throw Error("model '" + name + "' (" + label + ") layer " + std::to_string(l.index) + ": " + e.what());
    }
  }
  return spec;
}

/// architectures[0] when the config has the field: a non-empty list of class-name strings.
std::string config_architecture(const models::ConfigReader& top) {
  if (!top.has("architectures")) return {};
  const auto names = top.strings("architectures", 64);
  if (names.empty() || names[0].empty()) top.fail("architectures", "[]", "a non-empty list of class names");
  if (names[0].size() > 256) top.fail("architectures[0]", models::preview(names[0]), "a class name of at most 256 characters");
  return names[0];
}

}  // namespace

std::string_view to_string(LayerKind k) { return detail::name_of(kLayerKindNames, k); }

ModelSpec parse_model_config(const std::string& json_text, const std::string& name, const ModelOverrides& overrides) {
  const json top = models::parse_config_json(json_text, name);
  if (!top.is_object()) throw Error("model '" + name + "': config=" + models::preview(top) + " invalid: expected a JSON object");

  // Until the family is known, messages name the model only ("config" stands for the architecture).
  const models::ConfigReader outer(top, name, "config");
  const std::string architecture = config_architecture(outer);
  const std::string model_type = outer.string_or("model_type", "");
  if (architecture.empty() && model_type.empty()) {
    throw Error("model '" + name + "': config field 'architectures' is missing (and no 'model_type'): expected one of " +
                known_architectures());
  }
  const models::Family* family = find_family(architecture, model_type);
  const std::string label = architecture.empty() ? model_type : architecture;
  if (!family) {
    throw Error("model '" + name + "': unknown architecture '" + models::clip(label) + "' (model_type '" +
                models::clip(model_type) + "'): expected one of " + known_architectures());
  }

  // Multimodal wrappers (Gemma3ForConditionalGeneration) keep the language model in text_config.
  models::ConfigReader top_reader(top, name, label);
  if (top_reader.has("text_config") && !top["text_config"].is_object()) {
    top_reader.fail("text_config", models::preview(top.at("text_config")), "an object holding the language model's fields");
  }
  const json& text_json = top_reader.has("text_config") ? top.at("text_config") : top;
  models::ConfigReader reader(text_json, name, label);

  try {
    return build_spec(reader, top_reader, *family, json_text, overrides);
  } catch (const json::exception& e) {
    // Every field read goes through ConfigReader's typed checks; this is the net for any that does not.
    throw Error("model '" + name + "' (" + label + "): config could not be read: " + e.what());
  }
}

}  // namespace attn
