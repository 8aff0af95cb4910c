// The CPU layer (src/cpu): detection, the ATTN_CPU_ISA override, and every CPU family reporting
// the build that ran under each build this machine runs.
#include <gtest/gtest.h>

#include "attn/attn.hpp"
#include "kernels/gather/mla_kernel.hpp"
#include "cpu/detect.hpp"
#include "support/cpu_isa_env.hpp"
#include "support/mamba_reference.hpp"
#include "support/mla_reference.hpp"
#include "support/test_support.hpp"

namespace attn::test {
namespace {

using cpu::Isa;

/// A CPU platform that says it is the detected one but has only `spec`'s features.
Platform detected_like(const std::string& spec) {
  Platform p = parse_platform(spec);
  p.detected = true;
  return p;
}

TEST(CpuIsa, DetectionIsStable) {
  const Platform a = cpu::detect_features(), b = cpu::detect_features();
  EXPECT_EQ(a.features, b.features);
  EXPECT_EQ(a.cpu_vendor, b.cpu_vendor);
  for (CpuFeature f : a.features) EXPECT_TRUE(detect_cpu().has(f)) << to_string(f);
  EXPECT_EQ(cpu::best_isa(detect_cpu()), cpu::best_isa(detect_cpu()));
  const std::vector<Isa> here = cpu::runnable_isas(detect_cpu());
  ASSERT_FALSE(here.empty());
  EXPECT_EQ(here.front(), cpu::best_isa(detect_cpu()));
  EXPECT_EQ(here.back(), Isa::generic);
  for (std::size_t i = 1; i < here.size(); ++i) EXPECT_LT(here[i], here[i - 1]);
}

TEST(CpuIsa, BestBuildOfPlanningPlatforms) {
  EXPECT_EQ(cpu::best_isa(parse_platform("cpu:generic")), Isa::generic);
  EXPECT_EQ(cpu::best_isa(parse_platform("cpu:avx2")), Isa::avx2);
  EXPECT_EQ(cpu::best_isa(parse_platform("cpu:avx512")), Isa::avx512);
  EXPECT_EQ(cpu::best_isa(parse_platform("cpu:avx512_bf16")), Isa::avx512_bf16);
  EXPECT_EQ(cpu::best_isa(parse_platform("cuda:9.0")), Isa::generic);
  EXPECT_EQ(cpu::runnable_isas(parse_platform("cpu:avx2")), (std::vector<Isa>{Isa::avx2, Isa::generic}));
}

TEST(CpuIsa, OverrideParsing) {
  for (const char* automatic : {"", "auto"}) {
    ForceCpuIsa force(automatic);
    EXPECT_FALSE(cpu::forced_isa().has_value()) << "'" << automatic << "'";
  }
  for (Isa isa : cpu::all_isas()) {
    ForceCpuIsa force(isa);
    EXPECT_EQ(cpu::forced_isa(), isa) << cpu::to_string(isa);
  }
  ForceCpuIsa force("sse9");
  try {
    (void)cpu::forced_isa();
    FAIL() << "ATTN_CPU_ISA=sse9 must be rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ATTN_CPU_ISA=sse9 invalid: expected one of auto, amx, avx512_bf16, avx512, avx2, generic"),
              std::string::npos)
        << e.what();
  }
}

TEST(CpuIsa, ChoiceRoundsDownToTheFamilysBuilds) {
  const Platform bf16 = parse_platform("cpu:avx512_bf16");
  {
    ForceCpuIsa force("auto");
    EXPECT_EQ(cpu::choose(bf16, {Isa::avx512, Isa::generic}), Isa::avx512);
    EXPECT_EQ(cpu::choose(bf16, {Isa::amx, Isa::avx512_bf16, Isa::avx512, Isa::generic}), Isa::avx512_bf16);
  }
  {
    ForceCpuIsa force(Isa::avx2);  // the mixers and cpu_mla have no avx2 build
    EXPECT_EQ(cpu::choose(bf16, {Isa::avx512, Isa::generic}), Isa::generic);
    EXPECT_EQ(cpu::choose(bf16, {Isa::avx512_bf16, Isa::avx512, Isa::avx2, Isa::generic}), Isa::avx2);
  }
  ForceCpuIsa force(Isa::amx);  // a planning platform caps the request
  EXPECT_EQ(cpu::choose(bf16, {Isa::avx512_bf16, Isa::avx512, Isa::avx2, Isa::generic}), Isa::avx512_bf16);
  EXPECT_EQ(cpu::choose(parse_platform("cpu:avx2"), {Isa::avx512, Isa::generic}), Isa::generic);
}

TEST(CpuIsa, ForcingABuildThisCpuCannotRunIsAnError) {
  const Platform avx2 = detected_like("cpu:avx2");
  ForceCpuIsa force(Isa::avx512);
  try {
    (void)cpu::choose(avx2, {Isa::avx512, Isa::generic});
    FAIL() << "ATTN_CPU_ISA=avx512 on an AVX2 CPU must be rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ATTN_CPU_ISA=avx512 invalid: this CPU runs avx2, generic"), std::string::npos)
        << e.what();
  }
  // The same request on this machine: refused exactly when it cannot run it.
  const bool runs_avx512 = cpu::best_isa(detect_cpu()) >= Isa::avx512;
  bool refused = false;
  try {
    (void)cpu::choose(detect_cpu(), {Isa::avx512, Isa::generic});
  } catch (const Error&) {
    refused = true;
  }
  EXPECT_EQ(refused, !runs_avx512);
}

// Each family, under each build this machine runs, reports the build that ran: cpu_flash and
// cpu_mla in the RunResult of a forward and in the descriptor's variant, the mixers in variant().
TEST(CpuIsa, EveryFamilyReportsTheBuildThatRan) {
  for_each_cpu_isa(cpu::runnable_isas(detect_cpu()), [](Isa isa) {
    // cpu_flash: bf16 dot products only for bf16 q (on AMX tiles for head sizes of whole tile
    // rows: 64 here; a turboquant cache's prefill tiles too, its decode on fp32 rows); fp32 / fp16
    // q run the avx512 build on an AVX-512 BF16 machine, and say so.
    const Isa flash_isa = isa, flash_fp32 = std::min(isa, Isa::avx512);
    struct FlashLayer {
      DType dtype;
      KVCacheDType kv;
      Isa runs;
    };
    for (const FlashLayer& f : {FlashLayer{DType::bfloat16, KVCacheDType::auto_, flash_isa}, FlashLayer{DType::bfloat16, KVCacheDType::fp8_e4m3, flash_isa},
                                FlashLayer{DType::bfloat16, KVCacheDType::turboquant_4bit_nc, flash_isa},
                                FlashLayer{DType::float32, KVCacheDType::auto_, flash_fp32}, FlashLayer{DType::float16, KVCacheDType::auto_, flash_fp32}}) {
      CaseSpec flash;
      flash.config.num_heads = 4, flash.config.num_kv_heads = 2, flash.config.head_size = 64;
      flash.config.dtype = f.dtype, flash.config.kv_cache_dtype = f.kv;
      flash.seqs = {{9, 3}, {20, 1}};
      Case c = make_case(flash, "cpu_flash");
      ForwardArgs args;
      args.q = c.q.view(), args.out = c.out.view(), args.cache = c.cache.get();
      SCOPED_TRACE(std::string(to_string(f.dtype)) + " / " + std::string(to_string(f.kv)));
      EXPECT_EQ(c.impl->forward(c.md, args).variant, cpu::to_string(f.runs));
      EXPECT_EQ(Registry::instance().find("cpu_flash")->variant(detect_cpu(), flash.config), cpu::to_string(f.runs));
    }

    MlaCaseSpec mla_spec;
    mla_spec.num_heads = 4;
    mla_spec.seqs = {{9, 3}};
    MlaCase m = make_mla_case(mla_spec);
    ForwardArgs margs;
    margs.q = m.q.view(), margs.out = m.out.view(), margs.cache = m.cache.get();
    const Isa mla_isa = isa == Isa::avx2 ? Isa::generic : isa;
    EXPECT_EQ(m.impl->forward(m.md, margs).variant, mla::variant_name(mla_isa));

    // The selector's decisions name the same builds.
    const auto decided = [&](const char* backend) {
      return Registry::instance().find(backend)->variant(detect_cpu(), m.params.config);
    };
    EXPECT_EQ(decided("cpu_flash"), cpu::to_string(m.params.config.dtype == DType::bfloat16 ? flash_isa : flash_fp32));
    EXPECT_EQ(decided("cpu_mla"), mla::variant_name(mla_isa));
    EXPECT_EQ(decided("cpu_sparse"), std::string(mla::variant_name(mla_isa)));
    EXPECT_EQ(decided("cpu_blocksparse"), std::string(mla::variant_name(std::min(mla_isa, Isa::avx512_bf16))));

    const MixerParams mp = random_mixer_params(
        MixerConfig::from_dims(MambaType::short_conv, {{"d_inner", 8}, {"d_conv", 3}}), 1);
    EXPECT_EQ(create_mixer("short_conv", mp)->variant(), isa >= Isa::avx512 ? "avx512" : "generic");
  });
}

}  // namespace
}  // namespace attn::test
