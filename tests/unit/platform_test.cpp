// Platform detection and planning targets (platform.hpp): "cpu" is this machine; "cpu:<level>"
// and "cuda:<major>.<minor>" are planning targets with fixed features; bad specs list the forms.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "attn/platform.hpp"
#include "plugin/module_path.hpp"
#include "selector/selector_test_util.hpp"
#include "support/expect_error.hpp"

namespace {

using namespace attn;
using attn::test::throws_error;
using F = CpuFeature;

TEST(Platform, DetectedCpuIsMarkedDetectedAndSorted) {
  const Platform& p = detect_cpu();
  EXPECT_EQ(p.kind, PlatformKind::cpu);
  EXPECT_TRUE(p.detected);
  EXPECT_GE(p.cores, 1);
  EXPECT_TRUE(std::is_sorted(p.features.begin(), p.features.end()));
  EXPECT_TRUE(std::adjacent_find(p.features.begin(), p.features.end()) == p.features.end()) << "features are unique";
  EXPECT_EQ(&detect_cpu(), &p) << "memoized";
  EXPECT_EQ(p.to_string().find("[planning target]"), std::string::npos);
}

TEST(Platform, CpuSpecsMeanThisMachine) {
  for (const char* spec : {"", "cpu", "native"}) {
    const Platform p = parse_platform(spec);
    EXPECT_TRUE(p.detected) << spec;
    EXPECT_EQ(p.fingerprint(), detect_cpu().fingerprint()) << spec;
  }
}

TEST(Platform, CpuPlanningLevels) {
  const Platform generic = parse_platform("cpu:generic");
  EXPECT_FALSE(generic.detected);
  EXPECT_TRUE(generic.features.empty());
  EXPECT_EQ(generic.fingerprint(), "cpu");

  const Platform avx2 = parse_platform("cpu:avx2");
  EXPECT_EQ(avx2.kind, PlatformKind::cpu);
  EXPECT_FALSE(avx2.detected);
  EXPECT_EQ(avx2.features, (std::vector<CpuFeature>{F::avx2, F::fma}));
  EXPECT_FALSE(avx2.has(F::avx512f));
  EXPECT_NE(avx2.to_string().find("[planning target]"), std::string::npos);

  const Platform avx512 = parse_platform("cpu:avx512");
  EXPECT_TRUE(avx512.has(F::avx512f) && avx512.has(F::avx512bw) && avx512.has(F::avx512vl));
  EXPECT_FALSE(avx512.has(F::avx512_bf16));

  const Platform bf16 = parse_platform("cpu:avx512_bf16");
  EXPECT_TRUE(bf16.has(F::avx512_bf16) && bf16.has(F::avx512_vnni) && bf16.has(F::avx2));

  EXPECT_EQ(parse_platform("cpu:neon").features, (std::vector<CpuFeature>{F::neon}));
  // Different ISA levels are different cache keys.
  EXPECT_NE(avx2.fingerprint(), avx512.fingerprint());
  EXPECT_NE(avx512.fingerprint(), bf16.fingerprint());
}

TEST(Platform, CudaPlanningTarget) {
  const Platform p = parse_platform("cuda:9.0");
  EXPECT_EQ(p.kind, PlatformKind::cuda);
  EXPECT_FALSE(p.detected);
  EXPECT_EQ(p.cc, (ComputeCapability{9, 0}));
  EXPECT_EQ(p.cc.as_int(), 90);
  EXPECT_EQ(p.fingerprint(), "cuda:9.0");
  EXPECT_EQ(p.kind_name(), "cuda");
  EXPECT_NE(p.to_string().find("[planning target]"), std::string::npos);
  EXPECT_EQ(parse_platform("cuda:12.0").cc, (ComputeCapability{12, 0}));
  EXPECT_LT(parse_platform("cuda:8.6").cc, parse_platform("cuda:9.0").cc);
}

TEST(Platform, UnknownCpuLevelListsValidSpecs) {
  EXPECT_TRUE(throws_error([] { parse_platform("cpu:sse4"); },
                           {"platform='cpu:sse4'", "cpu:generic", "cpu:avx2", "cpu:avx512", "cuda:<major>.<minor>"}));
}

TEST(Platform, UnknownKindListsValidSpecs) {
  EXPECT_TRUE(throws_error([] { parse_platform("gpu"); }, {"platform='gpu'", "cpu, cpu:generic"}));
  EXPECT_TRUE(throws_error([] { parse_platform("rocm:9.4"); }, {"platform='rocm:9.4'"}));
}

TEST(Platform, MalformedCudaSpecs) {
  for (const char* spec : {"cuda:", "cuda:9", "cuda:x.y", "cuda:9.0x", "cuda:0.5", "cuda:9.10", "cuda:-1.0", "cuda:9.-1"})
    EXPECT_TRUE(throws_error([&] { parse_platform(spec); }, {std::string("platform='") + spec + "'", "cuda:<major>.<minor>"}))
        << spec;
}

TEST(Platform, CudaVersionsBeyondIntAreRefused) {
  // major * 10 + minor once overflowed for cuda:2147483647.0.
  for (const char* spec : {"cuda:2147483647.0", "cuda:99999999999999999999.0", "cuda:100.0", "cuda:9.99999999999"})
    EXPECT_TRUE(throws_error([&] { parse_platform(spec); }, {std::string("platform='") + spec + "'", "major 1..99"})) << spec;
  EXPECT_EQ(parse_platform("cuda:99.9").name, "sm_999");
}

TEST(Platform, DetectedCudaWithoutModuleOrDeviceSaysWhy) {
  Platform p;
  std::string why;
  if (detect_cuda(p, why)) GTEST_SKIP() << "a CUDA device is present: " << p.to_string();
  EXPECT_FALSE(why.empty());
  EXPECT_TRUE(throws_error([] { parse_platform("cuda"); }, {"platform='cuda' unavailable", "cuda:9.0"}));
}

// detect_cuda looks where the registry loads modules from: $ATTN_MODULE_PATH first. A file there
// that is not a library is tried first and its loader error reported.
TEST(Platform, DetectedCudaHonoursModulePath) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("attn_module_path_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path bogus = dir / "libattn_cuda.so";
  std::ofstream(bogus) << "not a shared library";
  {
    attn::test::ScopedEnv env("ATTN_MODULE_PATH", dir.string());
    const std::vector<std::string> found = detail::module_candidates("attn_cuda");
    ASSERT_FALSE(found.empty());
    EXPECT_EQ(found.front(), bogus.string());
    Platform p;
    std::string why;
    // With no module next to libattn, the bogus file is the only candidate and its error is the reason.
    if (found.size() == 1) {
      EXPECT_FALSE(detect_cuda(p, why));
      EXPECT_NE(why.find(bogus.string()), std::string::npos) << why;
    }
  }
  fs::remove_all(dir);
}

TEST(Platform, FeatureNames) {
  EXPECT_EQ(to_string(F::avx512_bf16), "avx512_bf16");
  EXPECT_EQ(to_string(F::amx_tile), "amx_tile");
  EXPECT_EQ(all_cpu_features().size(), 12u);
}

}  // namespace
