// ATTN_MIXER_ISA: the mixers' kernel build chosen from the environment when a mixer is created.
#include <gtest/gtest.h>

#include "mamba/mixer_variants.hpp"
#include "support/mamba_reference.hpp"

namespace attn::test {
namespace {

MixerParams mamba2_params() {
  return random_mixer_params(MixerConfig::from_dims(MambaType::mamba2, {{"num_heads", 2}, {"head_dim", 4}, {"d_state", 8},
                                                                        {"n_groups", 1}, {"d_conv", 4}}),
                             1);
}

TEST(MixerIsa, EnvChoosesTheKernelBuild) {
  const std::string best = mixer_isas().front();
  {
    ForceMixerIsa force("generic");
    EXPECT_EQ(create_mixer("mamba2", mamba2_params())->variant(), "generic");
  }
  {
    ForceMixerIsa force("avx512");  // capped at what this CPU runs
    EXPECT_EQ(create_mixer("mamba2", mamba2_params())->variant(), best);
  }
  for (const char* automatic : {"auto", ""}) {
    ForceMixerIsa force(automatic);
    EXPECT_EQ(create_mixer("gdn", random_mixer_params(MixerConfig::from_dims(MambaType::gdn_attention,
                                                                              {{"num_heads", 2}, {"num_k_heads", 1},
                                                                               {"head_k_dim", 8}, {"head_v_dim", 8},
                                                                               {"d_conv", 4}}),
                                                      2))
                  ->variant(),
              best);
  }
}

TEST(MixerIsa, UnknownValueListsTheValidOnes) {
  ForceMixerIsa force("sse9");
  try {
    create_mixer("mamba2", mamba2_params());
    ADD_FAILURE() << "no error for ATTN_MIXER_ISA=sse9";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("ATTN_MIXER_ISA=sse9"), std::string::npos) << what;
    EXPECT_NE(what.find("auto, avx512, generic"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace attn::test
