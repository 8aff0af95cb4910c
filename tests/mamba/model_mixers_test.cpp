// Every mixer layer of every shipped model config maps to a backend that runs it: the dims
// the model loader reads build a MixerConfig, select_mamba picks the backend, and one mixed
// prefill + decode step runs and writes finite values.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "attn/attn.hpp"
#include "attn/mamba.hpp"
#include "support/mamba_reference.hpp"

namespace attn {
namespace {

TEST(ModelMixers, EveryShippedMixerLayerRuns) {
  int mixer_models = 0;
  for (const std::string& name : builtin_models()) {
    const ModelSpec spec = load_model(name);
    std::set<std::string> seen;  // one layer per distinct (type, dims) is enough
    for (const ModelLayer& layer : spec.layers) {
      if (layer.kind != LayerKind::mixer) continue;
      SCOPED_TRACE(name + " layer " + std::to_string(layer.index));
      const MixerConfig c = MixerConfig::from_dims(layer.mixer, layer.mixer_dims);
      if (!seen.insert(c.to_string()).second) continue;
      const Decision d = select_mamba(layer.mixer, MambaSelectOptions{"", false, std::nullopt, nullptr});
      MixerParams p = test::random_mixer_params(c, 11);
      auto impl = create_mixer(d.backend, p);
      MambaStateCache cache(c, 2);
      const MixerBatch md = MixerBatch::build({5, 1}, {1, 0}, {0, 1}, 2);
      const test::MixerData data = test::random_mixer_inputs(c, md.num_tokens, 12);
      Buffer out(DType::float32, c.out_shape(md.num_tokens));
      std::fill_n(static_cast<float*>(out.data()), out.bytes() / 4, NAN);
      impl->forward(data.inputs(), cache, md, out.view());
      const float* o = static_cast<const float*>(out.data());
      for (std::size_t i = 0; i < out.bytes() / 4; ++i) ASSERT_TRUE(std::isfinite(o[i])) << c.to_string() << " at " << i;
    }
    mixer_models += !seen.empty();
  }
  EXPECT_GT(mixer_models, 0);
}

}  // namespace
}  // namespace attn
