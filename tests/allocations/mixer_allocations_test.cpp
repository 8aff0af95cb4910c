// A mixer run allocates nothing once warm: after one warm-up run (OpenMP's thread team) a step of
// decodes and chunked prefills through plan-sized workspaces — two layers, one plan — makes no
// heap allocation (counted by counting_new.hpp's operator new, this executable only).
#include <gtest/gtest.h>

#include "allocations/counting_new.hpp"
#include "support/mamba_checks.hpp"

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
    EXPECT_EQ(allocations_of([&] {
                for (int step = 0; step < 5; ++step) {
                  l1->run(*plan, a1);
                  l2->run(*plan, a2);
                }
              }),
              0);
    if (m.config.conv_dim() > 0) {  // the conv alone, as a Mamba-1 layer calls it before projecting
      Buffer xc(DType::float32, {md.num_tokens, m.config.conv_dim()});
      const MixerData conv_in = random_mixer_inputs(m.config, md.num_tokens, 9);
      const TensorView x = TensorView::contiguous(conv_in.x.data(), DType::float32, {md.num_tokens, m.config.conv_dim()});
      const TensorView out = xc.view();
      l1->conv(*plan, x, s1, out, &ws);
      EXPECT_EQ(allocations_of([&] { l1->conv(*plan, x, s1, out, &ws); }), 0);
    }
  }
}

}  // namespace
}  // namespace attn::test
