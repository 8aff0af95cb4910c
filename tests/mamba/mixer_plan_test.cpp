// Mixer plan / run: one plan per step serves every mixer layer of a config, equals the one-call
// forward() per layer, is printable, rejects a layer or state cache it was not made for, and
// two threads can run two layers under one plan at once.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "support/mamba_checks.hpp"

namespace attn::test {
namespace {

// A mixed step: decodes, a prefill spanning several chunks, an empty sequence, a fresh prefill.
const std::vector<int32_t> kLens = {1, 70, 0, 9, 1};
const std::vector<int32_t> kSlots = {4, 0, 2, 1, 3};
const std::vector<uint8_t> kInit = {1, 1, 0, 0, 1};
constexpr int32_t kSlotsTotal = 6;

struct Layer {
  std::unique_ptr<MixerImpl> impl;
  MambaStateCache cache;
  Layer(const SmallMixer& m, MixerParams p, uint64_t seed) : impl(create_mixer(m.backend, p)), cache(m.config, kSlotsTotal) {
    randomize_states(cache, seed);
  }
};

// Two layers of one config (different states and inputs; weights as given), each with a copy
// that runs through forward() as the expectation, and NaN-poisoned outputs. Seeds: states
// `seed`, `seed + 1`; inputs `seed + 2`, `seed + 3`.
struct TwoLayers {
  Layer a, b, a_want, b_want;
  MixerData da, db;
  Buffer out_a, out_b, want_a, want_b;
  TwoLayers(const SmallMixer& m, const MixerParams& pa, const MixerParams& pb, int32_t num_tokens, uint64_t seed)
      : a(m, pa, seed), b(m, pb, seed + 1), a_want(m, pa, seed), b_want(m, pb, seed + 1),
        da(random_mixer_inputs(m.config, num_tokens, seed + 2)), db(random_mixer_inputs(m.config, num_tokens, seed + 3)),
        out_a(poisoned_output(m.config, num_tokens)), out_b(poisoned_output(m.config, num_tokens)),
        want_a(poisoned_output(m.config, num_tokens)), want_b(poisoned_output(m.config, num_tokens)) {}
  void forward_expected(const MixerBatch& md) {
    a_want.impl->forward(da.inputs(), a_want.cache, md, want_a.view());
    b_want.impl->forward(db.inputs(), b_want.cache, md, want_b.view());
  }
};

// Empty states (a mixer without a conv state) have null data: memcmp must not see them.
bool same_floats(const void* a, const void* b, std::size_t bytes) { return bytes == 0 || std::memcmp(a, b, bytes) == 0; }

// body(m, md, seed) for every small mixer on the mixed step, under one fresh seed.
template <typename Body>
void for_each_small_mixer(Body body) {
  const uint64_t seed = fresh_seed();
  const MixerBatch md = MixerBatch::build(kLens, kSlots, kInit, kSlotsTotal);
  for (const SmallMixer& m : small_mixers()) {
    SCOPED_TRACE(m.backend + " seed " + std::to_string(seed));
    body(m, md, seed);
  }
}

TEST(MixerPlan, OnePlanServesTwoLayersAsForwardDoes) {
  for_each_small_mixer([](const SmallMixer& m, const MixerBatch& md, uint64_t seed) {
    MixerParams p = random_mixer_params(m.config, seed);
    p.chunk_size = 8;
    // Two layers of one config (different weights and states), planned once; each also runs
    // through forward() on a copy of its states as the expectation.
    MixerParams p2 = random_mixer_params(m.config, seed + 1);
    p2.chunk_size = 8;
    TwoLayers l(m, p, p2, md.num_tokens, seed + 2);
    const auto plan = l.a.impl->plan(md, kSlotsTotal);
    const std::string text = plan->to_string();
    EXPECT_EQ(text.find("chunked: 9 chunks") != std::string::npos, m.config.has_chunked_form()) << text;
    EXPECT_NE(text.find("recurrent"), std::string::npos) << text;
    EXPECT_NE(text.find("empty"), std::string::npos) << text;
    Workspace ws(plan->workspace_bytes());
    l.a.impl->run(*plan, {l.da.inputs(), &l.a.cache, l.out_a.view(), &ws});
    l.b.impl->run(*plan, {l.db.inputs(), &l.b.cache, l.out_b.view(), &ws});
    l.forward_expected(md);
    EXPECT_TRUE(same_floats(l.out_a.data(), l.want_a.data(), l.out_a.bytes()));
    EXPECT_TRUE(same_floats(l.out_b.data(), l.want_b.data(), l.out_b.bytes()));
    EXPECT_FALSE(same_floats(l.out_a.data(), l.out_b.data(), l.out_a.bytes()));  // two layers, two results
    for (auto [got, want] : {std::pair{&l.a.cache, &l.a_want.cache}, std::pair{&l.b.cache, &l.b_want.cache}}) {
      EXPECT_TRUE(same_floats(got->ssm_state().data, want->ssm_state().data, std::size_t(got->ssm_state().numel()) * 4));
      EXPECT_TRUE(same_floats(got->conv_state().data, want->conv_state().data, std::size_t(got->conv_state().numel()) * 4));
    }
  });
}

TEST(MixerPlan, RejectsALayerOrStateItWasNotMadeFor) {
  const MixerBatch md = MixerBatch::build(kLens, kSlots, kInit, kSlotsTotal);
  const std::vector<SmallMixer> mixers = small_mixers();
  const SmallMixer& m2 = mixers[1];  // mamba2
  MixerParams p = random_mixer_params(m2.config, 1);
  Layer layer(m2, p, 2);
  const MixerData data = random_mixer_inputs(m2.config, md.num_tokens, 3);
  Buffer out = poisoned_output(m2.config, md.num_tokens);
  auto error_of = [&](const MixerPlan& plan, MambaStateCache* state) {
    try {
      layer.impl->run(plan, {data.inputs(), state, out.view(), nullptr});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // Another backend's plan, another chunk size, another slot count, no state.
  const auto gdn = create_mixer("gdn", random_mixer_params(mixers[4].config, 1))->plan(md, kSlotsTotal);
  EXPECT_NE(error_of(*gdn, &layer.cache).find("plan.backend=gdn"), std::string::npos);
  MixerParams p16 = p;
  p16.chunk_size = 16;
  EXPECT_NE(error_of(*create_mixer("mamba2", p16)->plan(md, kSlotsTotal), &layer.cache).find("plan.chunk_size=16"),
            std::string::npos);
  const auto wider = layer.impl->plan(md, kSlotsTotal + 1);
  EXPECT_NE(error_of(*wider, &layer.cache).find("state.num_slots=6"), std::string::npos);
  EXPECT_NE(error_of(*layer.impl->plan(md, kSlotsTotal), nullptr).find("args.state=null"), std::string::npos);
  // The batch is validated once, by plan().
  MixerBatch bad = md;
  bad.state_slots[1] = kSlotsTotal;
  EXPECT_THROW(layer.impl->plan(bad, kSlotsTotal), Error);
}

TEST(MixerPlan, TwoThreadsRunTwoLayersUnderOnePlan) {
  for_each_small_mixer([](const SmallMixer& m, const MixerBatch& md, uint64_t seed) {
    MixerParams p = random_mixer_params(m.config, seed);
    p.num_threads = 2;
    TwoLayers l(m, p, p, md.num_tokens, seed + 1);
    const auto plan = l.a.impl->plan(md, kSlotsTotal);
    l.forward_expected(md);
    for (int rep = 0; rep < 3; ++rep) {  // the same step again from the same states
      randomize_states(l.a.cache, seed + 1), randomize_states(l.b.cache, seed + 2);
      std::thread ta([&] {
        Workspace ws;
        l.a.impl->run(*plan, {l.da.inputs(), &l.a.cache, l.out_a.view(), &ws});
      });
      std::thread tb([&] {
        Workspace ws;
        l.b.impl->run(*plan, {l.db.inputs(), &l.b.cache, l.out_b.view(), &ws});
      });
      ta.join(), tb.join();
      EXPECT_TRUE(same_floats(l.out_a.data(), l.want_a.data(), l.out_a.bytes()));
      EXPECT_TRUE(same_floats(l.out_b.data(), l.want_b.data(), l.out_b.bytes()));
    }
  });
}

}  // namespace
}  // namespace attn::test
