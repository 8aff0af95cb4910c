// short_conv (LFM2 gated short conv) against the fp64 recurrence.
#include "mamba/mixer_variants.hpp"
#include "support/mamba_checks_gtest.hpp"

namespace attn::test {
namespace {

MixerConfig short_conv_config(int d_inner, int d_conv) {
  return MixerConfig::from_dims(MambaType::short_conv, {{"d_inner", d_inner}, {"d_conv", d_conv}});
}

// Under each conv kernel build this CPU runs (the conv is the whole mixer here).
TEST(ShortConv, MatchesRecurrenceOnRaggedBatches) {
  for_each_mixer_isa([] {
    expect_mixer_conforms("short_conv", short_conv_config(40, 3));
    expect_mixer_conforms("short_conv", short_conv_config(7, 2));
  });
}

TEST(ShortConv, SplitPrefillEqualsOnePrefill) {
  for_each_mixer_isa([] { expect_mixer_split_invariant("short_conv", short_conv_config(24, 3)); });
}

TEST(ShortConv, RejectsBadInput) { expect_mixer_rejects_bad_input("short_conv", short_conv_config(8, 3)); }

}  // namespace
}  // namespace attn::test
