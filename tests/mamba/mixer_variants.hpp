#pragma once
// Mixer tests under every kernel build this CPU runs (ATTN_CPU_ISA), and the long-prefill
// checks that drive the chunked forms through whole register tiles and ragged edges.
#include <gtest/gtest.h>

#include <vector>

#include "support/cpu_isa_env.hpp"
#include "support/mamba_checks.hpp"

namespace attn::test {

/// Every mixer kernel build this CPU runs, best first ("avx512" only where the CPU has it).
inline std::vector<cpu::Isa> mixer_isas() { return family_isas_here({cpu::Isa::avx512, cpu::Isa::generic}); }

/// Runs `body` once per kernel build, the build named in every failure.
template <typename F>
void for_each_mixer_isa(F&& body) {
  for_each_cpu_isa(mixer_isas(), [&](cpu::Isa) { body(); });
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
