// mamba2 (chunked SSD prefill, single-step decode) against the fp64 recurrence, under every
// kernel build this CPU runs.
#include "mamba/mixer_variants.hpp"
#include "support/mamba_checks_gtest.hpp"

namespace attn::test {
namespace {

MixerConfig mamba2_config(int heads, int head_dim, int d_state, int groups, int d_conv) {
  return MixerConfig::from_dims(MambaType::mamba2, {{"num_heads", heads}, {"head_dim", head_dim}, {"d_state", d_state},
                                                    {"n_groups", groups}, {"d_conv", d_conv}});
}

TEST(Mamba2, MatchesRecurrenceOnRaggedBatches) {
  for_each_mixer_isa([] {
    expect_mixer_conforms("mamba2", mamba2_config(4, 8, 16, 2, 4));
    expect_mixer_conforms("mamba2", mamba2_config(3, 5, 7, 1, 3));
  });
}

TEST(Mamba2, SplitPrefillEqualsOnePrefill) {
  for_each_mixer_isa([] { expect_mixer_split_invariant("mamba2", mamba2_config(4, 8, 16, 2, 4)); });
}

// Whole register tiles (head_dim 64, d_state 128: the Mamba-2 layout) and ragged ones.
TEST(Mamba2, LongPrefillsAcrossChunks) {
  for_each_mixer_isa([] {
    expect_mixer_long_prefill("mamba2", mamba2_config(2, 64, 128, 1, 4));
    expect_mixer_long_prefill("mamba2", mamba2_config(4, 40, 24, 2, 4));
  });
}

TEST(Mamba2, RejectsBadInput) { expect_mixer_rejects_bad_input("mamba2", mamba2_config(2, 4, 8, 1, 4)); }

}  // namespace
}  // namespace attn::test
