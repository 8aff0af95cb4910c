// gdn (gated delta net: chunked prefill, recurrent decode) against the fp64 recurrence, under
// every kernel build this CPU runs.
#include "mamba/mixer_variants.hpp"
#include "support/mamba_checks_gtest.hpp"

namespace attn::test {
namespace {

MixerConfig gdn_config(int v_heads, int k_heads, int dk, int dv, int d_conv) {
  return MixerConfig::from_dims(MambaType::gdn_attention, {{"num_heads", v_heads}, {"num_k_heads", k_heads},
                                                           {"head_k_dim", dk}, {"head_v_dim", dv}, {"d_conv", d_conv}});
}

TEST(Gdn, MatchesRecurrenceOnRaggedBatches) {
  for_each_mixer_isa([] {
    expect_mixer_conforms("gdn", gdn_config(4, 2, 16, 8, 4));
    expect_mixer_conforms("gdn", gdn_config(3, 1, 9, 5, 3));
  });
}

TEST(Gdn, SplitPrefillEqualsOnePrefill) {
  for_each_mixer_isa([] { expect_mixer_split_invariant("gdn", gdn_config(4, 2, 16, 16, 4)); });
}

// Whole register tiles (128 × 128: Qwen3-Next's heads) and ragged ones.
TEST(Gdn, LongPrefillsAcrossChunks) {
  for_each_mixer_isa([] {
    expect_mixer_long_prefill("gdn", gdn_config(2, 1, 128, 128, 4));
    expect_mixer_long_prefill("gdn", gdn_config(3, 1, 24, 40, 4));
  });
}

TEST(Gdn, RejectsBadInput) { expect_mixer_rejects_bad_input("gdn", gdn_config(2, 1, 8, 8, 4)); }

}  // namespace
}  // namespace attn::test
