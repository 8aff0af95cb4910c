// A mixer run allocates nothing once warm: global operator new counts every allocation of the
// process (this executable only), and after one warm-up run (OpenMP's thread team) a step of
// decodes and chunked prefills through plan-sized workspaces — two layers, one plan — must not
// reach it. Its own executable so the counting allocator replaces nothing in the main suite.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "support/mamba_checks.hpp"

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace attn::test {
namespace {

TEST(MixerAlloc, RunAllocatesNothingAfterWarmUp) {
  const MixerBatch md = MixerBatch::build({1, 70, 0, 9, 1}, {4, 0, 2, 1, 3}, {1, 1, 0, 0, 1}, 6);
  for (const SmallMixer& m : small_mixers()) {
    SCOPED_TRACE(m.backend);
    MixerParams p = random_mixer_params(m.config, 7);
    p.chunk_size = 8;
    auto l1 = create_mixer(m.backend, p), l2 = create_mixer(m.backend, p);
    MambaStateCache s1(m.config, 6), s2(m.config, 6);
    const MixerData data = random_mixer_inputs(m.config, md.num_tokens, 8);
    Buffer o1 = poisoned_output(m.config, md.num_tokens), o2 = poisoned_output(m.config, md.num_tokens);
    const auto plan = l1->plan(md, 6);
    Workspace ws(plan->workspace_bytes());
    const MixerArgs a1{data.inputs(), &s1, o1.view(), &ws}, a2{data.inputs(), &s2, o2.view(), &ws};
    l1->run(*plan, a1);  // warm-up: OpenMP's threads
    const long before = g_allocations.load();
    for (int step = 0; step < 5; ++step) {
      l1->run(*plan, a1);
      l2->run(*plan, a2);
    }
    EXPECT_EQ(g_allocations.load() - before, 0);
    if (m.config.conv_dim() > 0) {  // the conv alone, as a Mamba-1 layer calls it before projecting
      Buffer xc(DType::float32, {md.num_tokens, m.config.conv_dim()});
      const MixerData conv_in = random_mixer_inputs(m.config, md.num_tokens, 9);
      const TensorView x = TensorView::contiguous(conv_in.x.data(), DType::float32, {md.num_tokens, m.config.conv_dim()});
      const TensorView out = xc.view();
      l1->conv(*plan, x, s1, out, &ws);
      const long conv_before = g_allocations.load();
      l1->conv(*plan, x, s1, out, &ws);
      EXPECT_EQ(g_allocations.load() - conv_before, 0);
    }
  }
}

}  // namespace
}  // namespace attn::test
