// ATTN_CPU_ISA: the mixers' kernel build chosen from the environment when a mixer is created.
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
  const std::string best(cpu::to_string(mixer_isas().front()));
  // Every build this CPU runs: the mixers have avx512 and generic builds, so the builds above
  // avx512 run avx512 and avx2 runs generic.
  for (cpu::Isa isa : cpu::runnable_isas(detect_cpu())) {
    ForceCpuIsa force(isa);
    EXPECT_EQ(create_mixer("mamba2", mamba2_params())->variant(), isa >= cpu::Isa::avx512 ? "avx512" : "generic")
        << cpu::to_string(isa);
  }
  for (const char* automatic : {"auto", ""}) {
    ForceCpuIsa force(automatic);
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
  ForceCpuIsa force("sse9");
  try {
    create_mixer("mamba2", mamba2_params());
    ADD_FAILURE() << "no error for ATTN_CPU_ISA=sse9";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("ATTN_CPU_ISA=sse9"), std::string::npos) << what;
    EXPECT_NE(what.find("auto, amx, avx512_bf16, avx512, avx2, generic"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace attn::test
