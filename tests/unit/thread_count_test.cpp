// The thread-count rule (src/cpu/threads.hpp): an OpenMP default above what the runtime can start
// (OMP_NUM_THREADS=100000) is clamped to limits::kMaxThreads in every parallel region, so the
// backends and mixers still run and agree with the fp64 references instead of crashing in GOMP.
#include <gtest/gtest.h>
#include <omp.h>

#include "attn/limits.hpp"
#include "cpu/threads.hpp"
#include "support/mamba_checks.hpp"
#include "support/test_support.hpp"

namespace attn {
namespace {

/// omp_set_num_threads(n) for one test: what OMP_NUM_THREADS=n gives every later region.
class OmpDefault {
 public:
  explicit OmpDefault(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~OmpDefault() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

TEST(ThreadCount, TeamSizeClampsRequestsAndTheDefault) {
  EXPECT_EQ(cpu::team_size(3), 3);
  EXPECT_EQ(cpu::team_size(limits::kMaxThreads + 1), limits::kMaxThreads);
  const OmpDefault huge(100000);
  EXPECT_EQ(cpu::team_size(), limits::kMaxThreads);
  EXPECT_EQ(cpu::team_size(0), limits::kMaxThreads);
}

TEST(ThreadCount, AttentionBackendsRunUnderAnOversizedDefault) {
  const OmpDefault huge(100000);
  for (const char* backend : {"cpu_flash", "reference"}) {
    test::CaseSpec spec;
    spec.config.num_heads = 4;
    spec.config.num_kv_heads = 2;
    spec.config.head_size = 64;
    spec.config.dtype = DType::bfloat16;
    spec.seqs = {{37, 1}, {0, 9}, {20, 3}};
    spec.seed = test::fresh_seed();
    const auto r = test::check_backend(spec, backend);
    EXPECT_TRUE(r.ok) << backend << ": " << r.message << "\n" << spec.describe();
  }
}

TEST(ThreadCount, MixersRunUnderAnOversizedDefault) {
  const OmpDefault huge(100000);
  for (const auto& m : test::small_mixers()) {
    const auto r = test::check_mixer_batch(m.backend, m.config, {5, 1, 3}, test::fresh_seed());
    EXPECT_TRUE(r.ok) << m.backend << ": " << r.message;
  }
}

}  // namespace
}  // namespace attn
