// linear (decayed linear attention, chunked prefill) against the fp64 recurrence, under every
// kernel build this CPU runs.
#include "mamba/mixer_variants.hpp"
#include "support/mamba_checks_gtest.hpp"

namespace attn::test {
namespace {

MixerConfig linear_config(int heads, int dk, int dv) {
  return MixerConfig::from_dims(MambaType::linear_attention, {{"num_heads", heads}, {"head_k_dim", dk}, {"head_v_dim", dv}});
}

TEST(Linear, MatchesRecurrenceOnRaggedBatches) {
  for_each_mixer_isa([] {
    expect_mixer_conforms("linear", linear_config(3, 16, 8));
    expect_mixer_conforms("linear", linear_config(2, 7, 9));
  });
}

TEST(Linear, SplitPrefillEqualsOnePrefill) {
  for_each_mixer_isa([] { expect_mixer_split_invariant("linear", linear_config(2, 16, 16)); });
}

// Whole register tiles (96 × 96: MiniMax's head) and ragged ones.
TEST(Linear, LongPrefillsAcrossChunks) {
  for_each_mixer_isa([] {
    expect_mixer_long_prefill("linear", linear_config(2, 96, 96));
    expect_mixer_long_prefill("linear", linear_config(3, 20, 33));
  });
}

TEST(Linear, RejectsBadInput) { expect_mixer_rejects_bad_input("linear", linear_config(2, 8, 8)); }

}  // namespace
}  // namespace attn::test
