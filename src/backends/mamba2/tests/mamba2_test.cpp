// mamba2 (chunked SSD prefill, single-step decode) against the fp64 recurrence.
#include "support/mamba_checks_gtest.hpp"

namespace attn::test {
namespace {

MixerConfig mamba2_config(int heads, int head_dim, int d_state, int groups, int d_conv) {
  return MixerConfig::from_dims(MambaType::mamba2, {{"num_heads", heads}, {"head_dim", head_dim}, {"d_state", d_state},
                                                    {"n_groups", groups}, {"d_conv", d_conv}});
}

TEST(Mamba2, MatchesRecurrenceOnRaggedBatches) {
  expect_mixer_conforms("mamba2", mamba2_config(4, 8, 16, 2, 4));
  expect_mixer_conforms("mamba2", mamba2_config(3, 5, 7, 1, 3));
}

TEST(Mamba2, SplitPrefillEqualsOnePrefill) { expect_mixer_split_invariant("mamba2", mamba2_config(4, 8, 16, 2, 4)); }

TEST(Mamba2, RejectsBadInput) { expect_mixer_rejects_bad_input("mamba2", mamba2_config(2, 4, 8, 1, 4)); }

}  // namespace
}  // namespace attn::test
