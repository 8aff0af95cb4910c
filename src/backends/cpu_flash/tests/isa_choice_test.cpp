// The build cpu_flash runs when nothing is forced. Decode takes bf16 dot products wherever the CPU
// has them: it is bound by the bytes it reads, which the bf16 pair cache halves. The prefill tiles
// take fp32 where this CPU's bf16 dot products are slower than its fp32 FMA (measured once; Intel
// Sapphire / Emerald Rapids). The conformance sweeps force one build, which takes its own tiles,
// so this mixed default is checked against the reference here.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "backends/cpu_flash/prefill.hpp"
#include "backends/cpu_flash/tests/cpu_flash_test_util.hpp"
#include "support/test_support.hpp"

namespace attn::cpu_flash::test {
namespace {

/// Clears ATTN_CPU_ISA for the scope (the ctest runs under a forced build set it).
class UnforcedIsa {
 public:
  UnforcedIsa() {
    if (const char* old = std::getenv(cpu::kIsaEnv)) old_ = old;
    unsetenv(cpu::kIsaEnv);
  }
  ~UnforcedIsa() {
    if (old_) setenv(cpu::kIsaEnv, old_->c_str(), 1);
  }
  UnforcedIsa(const UnforcedIsa&) = delete;
  UnforcedIsa& operator=(const UnforcedIsa&) = delete;

 private:
  std::optional<std::string> old_;
};

TEST(CpuFlashIsaChoice, DecodeTakesTheBestBuildAndTilesFollowTheMeasuredRates) {
  UnforcedIsa unforced;
  const Platform here = detect_cpu();
  EXPECT_EQ(chosen_isa(here), best_isa(here));
  for (Isa isa : variants()) {
    EXPECT_EQ(tile_isa(isa, /*named=*/true), isa) << to_string(isa);
    if (isa != Isa::avx512_bf16) {
      EXPECT_EQ(tile_isa(isa, /*named=*/false), isa) << to_string(isa);
    }
  }
#if defined(__x86_64__)
  if (best_isa(here) == Isa::avx512_bf16) {
    const Isa tiles = prefill::bf16_dot_beats_fma() ? Isa::avx512_bf16 : Isa::avx512;
    EXPECT_EQ(tile_isa(Isa::avx512_bf16, /*named=*/false), tiles);
    ForceIsa forced(Isa::avx512_bf16);  // a forced build runs its own tiles
    EXPECT_EQ(tile_isa(Isa::avx512_bf16, /*named=*/false), Isa::avx512_bf16);
  }
#endif
}

TEST(CpuFlashIsaChoice, UnforcedBuildMatchesTheReference) {
  UnforcedIsa unforced;
  for (KVCacheDType kv : {KVCacheDType::auto_, KVCacheDType::fp8_e4m3}) {
    for (DType io : {DType::bfloat16, DType::float32}) {
      attn::test::CaseSpec spec;
      spec.config.num_heads = 8, spec.config.num_kv_heads = 2, spec.config.head_size = 128;
      spec.config.dtype = io, spec.config.kv_cache_dtype = kv;
      spec.block_size = 64;
      // prefills long enough for the tiles, chunked prefill, decode rows and a split context
      spec.seqs = {{0, 300}, {40, 100}, {200, 17}, {63, 1}, {1000, 1}};
      if (!quick()) spec.seqs.push_back({2500, 1});
      spec.seed = attn::test::fresh_seed();
      const auto r = attn::test::check_backend(spec, "cpu_flash");
      EXPECT_TRUE(r.ok) << r.message << "\n  " << spec.describe();
    }
  }
}

}  // namespace
}  // namespace attn::cpu_flash::test
