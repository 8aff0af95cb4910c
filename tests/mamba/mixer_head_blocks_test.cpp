// The chunked forms with several heads per task (mamba2: heads of one group; gdn: value heads of
// one key head; linear: adjacent heads). How many heads a task takes depends on the thread count,
// so the shared conformance drivers may never see a block on a many-core machine: here one
// thread and enough heads force blocks of 4, over long prefills continuing carried-in states.
#include <gtest/gtest.h>

#include "mamba/mixer_variants.hpp"
#include "support/mamba_reference.hpp"

namespace attn::test {
namespace {

void expect_blocked_prefill_matches(const std::string& backend, const MixerConfig& config) {
  const uint64_t seed = fresh_seed();
  for (int chunk : {64, 16}) {
    MixerParams params = random_mixer_params(config, seed + chunk);
    params.chunk_size = chunk;
    params.num_threads = 1;  // 2 sequences × 8 heads on one thread: tasks of 4 heads
    auto impl = create_mixer(backend, params);
    const MixerBatch md = MixerBatch::build({150, 37}, {1, 0}, {1, 1}, 2);
    MambaStateCache cache(config, 2);
    randomize_states(cache, seed + 1);
    RefMixerState ref = ref_state_from(cache);
    const MixerData data = random_mixer_inputs(config, md.num_tokens, seed + 2);
    Buffer out(DType::float32, config.out_shape(md.num_tokens));
    impl->forward(data.inputs(), cache, md, out.view());
    const std::vector<double> want = reference_mixer(params, data.inputs(), ref, md);
    const std::string ctx = backend + " chunk=" + std::to_string(chunk) + " seed=" + std::to_string(seed);
    const MixerCompare o = compare_values(static_cast<const float*>(out.data()), want, mixer_tolerance(), "out");
    EXPECT_TRUE(o.ok) << ctx << ": " << o.message;
    for (int32_t slot = 0; slot < 2; ++slot) {
      const MixerCompare s = compare_values(cache.ssm_slot(slot), ref.ssm[slot], mixer_tolerance(), "ssm_state");
      EXPECT_TRUE(s.ok) << ctx << " slot " << slot << ": " << s.message;
    }
  }
}

TEST(MixerHeadBlocks, ChunkedPrefillWithSeveralHeadsPerTask) {
  for_each_mixer_isa([] {
    expect_blocked_prefill_matches("mamba2", MixerConfig::from_dims(MambaType::mamba2, {{"num_heads", 8}, {"head_dim", 24},
                                                                                       {"d_state", 40}, {"n_groups", 2},
                                                                                       {"d_conv", 4}}));
    expect_blocked_prefill_matches("gdn", MixerConfig::from_dims(MambaType::gdn_attention,
                                                                 {{"num_heads", 8}, {"num_k_heads", 2}, {"head_k_dim", 32},
                                                                  {"head_v_dim", 20}, {"d_conv", 4}}));
    expect_blocked_prefill_matches("linear", MixerConfig::from_dims(MambaType::linear_attention,
                                                                    {{"num_heads", 8}, {"head_k_dim", 24}, {"head_v_dim", 40}}));
  });
}

}  // namespace
}  // namespace attn::test
