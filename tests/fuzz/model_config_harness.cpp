// Harness: the config reader. Any byte string is a candidate config.json.
#include <string>

#include "attn/error.hpp"
#include "attn/mamba.hpp"
#include "attn/model.hpp"
#include "fuzz/harnesses.hpp"

namespace attn::fuzz {

int model_config(const uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const ModelSpec spec = parse_model_config(text, "fuzz");
    for (const auto& layer : spec.layers) {
      if (layer.kind == LayerKind::attention) {
        layer.attention.validate();
        (void)layer.attention.to_string();
      } else {
        // Mixer dims come from the config too: they must reach a valid MixerConfig or an Error.
        const MixerConfig m = MixerConfig::from_dims(layer.mixer, layer.mixer_dims);
        m.validate();
        (void)m.to_string();
      }
    }
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace attn::fuzz
