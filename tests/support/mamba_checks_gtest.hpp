#pragma once
// GoogleTest wrappers over the mixer conformance drivers (one place, so each backend's test
// file only lists its configs).
#include <gtest/gtest.h>

#include <cstring>

#include "support/mamba_checks.hpp"

namespace attn::test {

/// Ragged batches (decode, odd prefills, an empty sequence, long prefills spanning chunks) at
/// several chunk sizes, chunk 0 being the sequential recurrence.
inline void expect_mixer_conforms(const std::string& backend, const MixerConfig& config) {
  const uint64_t seed = fresh_seed();
  const std::vector<std::vector<int32_t>> batches = {{1}, {1, 1, 1}, {17, 1, 33, 0, 5, 1, 70}, {130}};
  for (int chunk : {64, 8, 0}) {
    for (std::size_t i = 0; i < batches.size(); ++i) {
      const MixerCheck r = check_mixer_batch(backend, config, batches[i], seed + 97 * i + chunk);
      EXPECT_TRUE(r.ok) << r.message;
    }
  }
}

/// Prefill-then-decode (and prefill split at arbitrary points) equals one long prefill.
inline void expect_mixer_split_invariant(const std::string& backend, const MixerConfig& config) {
  const uint64_t seed = fresh_seed();
  for (int chunk : {8, 64, 0}) {
    const MixerCheck r = check_mixer_split(backend, config, 45, {7, 8, 9, 30}, seed + chunk, chunk);
    EXPECT_TRUE(r.ok) << r.message;
    const MixerCheck r2 = check_mixer_split(backend, config, 23, {1, 2, 3, 4, 5}, seed + chunk + 1, chunk);
    EXPECT_TRUE(r2.ok) << r2.message;
  }
}

/// Bad slots and shapes are rejected with attn::Error naming the argument.
inline void expect_mixer_rejects_bad_input(const std::string& backend, const MixerConfig& config) {
  auto impl = create_mixer(backend, random_mixer_params(config, 5));
  MambaStateCache cache(config, 4);
  const MixerData data = random_mixer_inputs(config, 6, 7);
  Buffer out(DType::float32, config.out_shape(6));
  auto expect_error = [&](const MixerBatch& md, const MixerInputs& in, const TensorView& o, const std::string& names) {
    try {
      impl->forward(in, cache, md, o);
      ADD_FAILURE() << "no error; expected one naming " << names;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
    }
  };
  MixerBatch md = MixerBatch::build({4, 2}, {0, 1}, {0, 1}, 4);
  md.state_slots[1] = 4;  // out of range
  expect_error(md, data.inputs(), out.view(), "state_slots[1]=4");
  md.state_slots[1] = 0;  // duplicate
  expect_error(md, data.inputs(), out.view(), "state_slots[1]=0");
  md.state_slots[1] = -1;
  expect_error(md, data.inputs(), out.view(), "state_slots[1]=-1");
  md.state_slots[1] = 1;
  md.num_tokens = 7;  // disagrees with query_start_loc
  expect_error(md, data.inputs(), out.view(), "num_tokens=7");
  md.num_tokens = 6;
  MixerInputs in = data.inputs();
  in.x.shape[1] += 1;
  expect_error(md, in, out.view(), "x");
  const MixerData short_data = random_mixer_inputs(config, 5, 7);
  expect_error(md, short_data.inputs(), out.view(), "x");
  TensorView bad_out = out.view();
  bad_out.shape[0] = 5;
  expect_error(md, data.inputs(), bad_out, "out");
  MambaStateCache other(MixerConfig::from_dims(MambaType::short_conv, {{"d_inner", 3}, {"d_conv", 2}}), 4);
  try {
    impl->forward(data.inputs(), other, md, out.view());
    ADD_FAILURE() << "no error for a state cache of another config";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("state.config"), std::string::npos) << e.what();
  }
}

}  // namespace attn::test
