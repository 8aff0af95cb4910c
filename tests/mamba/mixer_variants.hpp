#pragma once
// Mixer tests under every kernel build this CPU runs (ATTN_MIXER_ISA), and the long-prefill
// checks that drive the chunked forms through whole register tiles and ragged edges.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "attn/platform.hpp"
#include "support/mamba_checks.hpp"

namespace attn::test {

/// Every mixer kernel build this CPU runs, best first ("avx512" only where the CPU has it).
inline std::vector<std::string> mixer_isas() {
  const Platform& p = detect_cpu();
  const bool avx512 = p.has(CpuFeature::avx512f) && p.has(CpuFeature::avx512bw) && p.has(CpuFeature::avx512vl);
  if (avx512) return {"avx512", "generic"};
  return {"generic"};
}

/// Sets ATTN_MIXER_ISA for the scope (a mixer picks its kernel build when it is created).
class ForceMixerIsa {
 public:
  explicit ForceMixerIsa(const std::string& isa) {
    if (const char* old = std::getenv("ATTN_MIXER_ISA")) old_ = old;
    setenv("ATTN_MIXER_ISA", isa.c_str(), 1);
  }
  ~ForceMixerIsa() { old_ ? setenv("ATTN_MIXER_ISA", old_->c_str(), 1) : unsetenv("ATTN_MIXER_ISA"); }

 private:
  std::optional<std::string> old_;
};

/// Runs `body` once per kernel build, the build named in every failure.
template <typename F>
void for_each_mixer_isa(F&& body) {
  for (const std::string& isa : mixer_isas()) {
    SCOPED_TRACE("ATTN_MIXER_ISA=" + isa);
    ForceMixerIsa force(isa);
    body();
  }
}

/// Long prefills: a sequence of 229 tokens (no multiple of the chunk) continuing a carried-in
/// state next to a decode and a fresh 50-token prefill; then 300 tokens cut into a decode step
/// and prefills of 129, 1, 119 and 50 tokens, each crossing several chunks from the state the
/// previous piece left. Chunk 64 (the default) and 16 (many chunks, a short tail).
inline void expect_mixer_long_prefill(const std::string& backend, const MixerConfig& config) {
  const uint64_t seed = fresh_seed();
  for (int chunk : {64, 16}) {
    const MixerCheck r = check_mixer_batch(backend, config, {1, 229, 50}, seed + chunk, chunk);
    EXPECT_TRUE(r.ok) << r.message;
    const MixerCheck s = check_mixer_split(backend, config, 300, {1, 130, 131, 250}, seed + chunk + 1, chunk);
    EXPECT_TRUE(s.ok) << s.message;
  }
}

}  // namespace attn::test
