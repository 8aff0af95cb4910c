// mamba1 against the fp64 selective-scan recurrence, under every kernel build this CPU runs.
#include "mamba/mixer_variants.hpp"
#include "support/mamba_checks_gtest.hpp"

namespace attn::test {
namespace {

MixerConfig mamba1_config(int d_inner, int d_state, int d_conv) {
  return MixerConfig::from_dims(MambaType::mamba1, {{"d_inner", d_inner}, {"d_state", d_state}, {"d_conv", d_conv}});
}

TEST(Mamba1, MatchesRecurrenceOnRaggedBatches) {
  for_each_mixer_isa([] {
    expect_mixer_conforms("mamba1", mamba1_config(40, 16, 4));
    expect_mixer_conforms("mamba1", mamba1_config(13, 5, 3));
  });
}

TEST(Mamba1, SplitPrefillEqualsOnePrefill) {
  for_each_mixer_isa([] { expect_mixer_split_invariant("mamba1", mamba1_config(24, 16, 4)); });
}

TEST(Mamba1, RejectsBadInput) { expect_mixer_rejects_bad_input("mamba1", mamba1_config(8, 4, 4)); }

// A real Mamba-1 layer projects dt/B/C from the conv output: conv() then forward(x_is_convolved)
// must equal forward() on the raw x.
TEST(Mamba1, SeparateConvThenScanEqualsForward) {
  const MixerConfig c = mamba1_config(24, 8, 4);
  auto impl = create_mixer("mamba1", random_mixer_params(c, 3));
  const MixerBatch md = MixerBatch::build({9, 1, 4}, {2, 0, 1}, {0, 1, 1}, 3);
  const MixerData data = random_mixer_inputs(c, md.num_tokens, 4);
  MambaStateCache a(c, 3), b(c, 3);
  randomize_states(a, 5);
  randomize_states(b, 5);
  Buffer out_a(DType::float32, {md.num_tokens, 24}), out_b(DType::float32, {md.num_tokens, 24});
  Buffer xc(DType::float32, {md.num_tokens, 24});
  impl->forward(data.inputs(), a, md, out_a.view());
  impl->conv(data.x.view(), b, md, xc.view());
  MixerInputs in = data.inputs();
  in.x = xc.view();
  in.x_is_convolved = true;
  impl->forward(in, b, md, out_b.view());
  EXPECT_EQ(0, std::memcmp(out_a.data(), out_b.data(), out_a.bytes()));
  EXPECT_EQ(0, std::memcmp(a.ssm_state().data, b.ssm_state().data, a.ssm_slot_floats() * 3 * 4));
}

}  // namespace
}  // namespace attn::test
