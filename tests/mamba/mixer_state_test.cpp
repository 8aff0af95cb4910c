// MixerConfig, MambaStateCache and MixerBatch: shapes, config parsing, validation errors.
#include <gtest/gtest.h>

#include "attn/attn.hpp"
#include "attn/mamba.hpp"
#include "support/expect_error.hpp"

namespace attn {
namespace {

using test::error_message;

TEST(MixerState, StateShapesPerType) {
  const auto m1 = MixerConfig::from_dims(MambaType::mamba1, {{"d_inner", 1536}, {"d_state", 16}, {"d_conv", 4}});
  EXPECT_EQ(m1.conv_state_shape(3), (std::vector<int64_t>{3, 1536, 3}));
  EXPECT_EQ(m1.ssm_state_shape(3), (std::vector<int64_t>{3, 1536, 16}));
  const auto m2 = MixerConfig::from_dims(MambaType::mamba2, {{"num_heads", 24}, {"head_dim", 64}, {"d_state", 128},
                                                             {"n_groups", 1}, {"d_conv", 4}});
  EXPECT_EQ(m2.conv_dim(), 1536 + 256);
  EXPECT_EQ(m2.ssm_state_shape(2), (std::vector<int64_t>{2, 24, 64, 128}));
  const auto gdn = MixerConfig::from_dims(MambaType::gdn_attention, {{"num_heads", 32}, {"num_k_heads", 16},
                                                                     {"head_k_dim", 128}, {"head_v_dim", 128}, {"d_conv", 4}});
  EXPECT_EQ(gdn.conv_dim(), 2 * 16 * 128 + 32 * 128);
  EXPECT_EQ(gdn.ssm_state_shape(1), (std::vector<int64_t>{1, 32, 128, 128}));
  const auto lin = MixerConfig::from_dims(MambaType::linear_attention, {{"num_heads", 64}, {"head_k_dim", 96}});
  EXPECT_EQ(lin.conv_state_shape(5), (std::vector<int64_t>{5, 0, 0}));
  EXPECT_EQ(lin.ssm_state_shape(5), (std::vector<int64_t>{5, 64, 96, 96}));
  MambaStateCache cache(gdn, 2);
  EXPECT_EQ(cache.ssm_state().shape_string(), "[2, 32, 128, 128]");
  EXPECT_EQ(cache.bytes(), std::size_t(2) * (gdn.conv_dim() * 3 + 32 * 128 * 128) * 4);
}

TEST(MixerState, ConfigErrorsNameTheField) {
  EXPECT_NE(error_message([] { MixerConfig::from_dims(MambaType::mamba1, {{"d_inner", 8}, {"d_conv", 4}}); }).find("'d_state'"),
            std::string::npos);
  EXPECT_NE(error_message([] {
              MixerConfig::from_dims(MambaType::mamba2, {{"num_heads", 6}, {"head_dim", 4}, {"d_state", 8}, {"n_groups", 4}, {"d_conv", 4}});
            }).find("n_groups=4"),
            std::string::npos);
  EXPECT_NE(error_message([] {
              MixerConfig::from_dims(MambaType::gdn_attention, {{"num_heads", 6}, {"num_k_heads", 4}, {"head_k_dim", 8}, {"d_conv", 4}});
            }).find("num_k_heads=4"),
            std::string::npos);
  MixerParams p;
  p.config = MixerConfig::from_dims(MambaType::mamba2, {{"num_heads", 2}, {"head_dim", 4}, {"d_state", 8}, {"d_conv", 4}});
  p.A = {-1.0f};
  p.conv_weight.assign(std::size_t(p.config.conv_dim() * 4), 0.1f);
  EXPECT_NE(error_message([&] { p.validate(); }).find("A.size()=1"), std::string::npos);
  p.A = {-1.0f, 0.5f};
  EXPECT_NE(error_message([&] { p.validate(); }).find("A[1]=0.5"), std::string::npos);
}

TEST(MixerState, BatchValidation) {
  EXPECT_NE(error_message([] { MixerBatch::build({3, 1}, {0, 0}, {0, 0}, 4); }).find("state_slots[1]=0"), std::string::npos);
  EXPECT_NE(error_message([] { MixerBatch::build({3, 1}, {0, 4}, {0, 0}, 4); }).find("state_slots[1]=4"), std::string::npos);
  EXPECT_NE(error_message([] { MixerBatch::build({3, -1}, {0, 1}, {0, 0}, 4); }).find("query_lens[1]=-1"), std::string::npos);
  EXPECT_NE(error_message([] { MixerBatch::build({3}, {0, 1}, {0}, 4); }).find("state_slots.size()=2"), std::string::npos);
  EXPECT_NE(error_message([] { MixerBatch::build({3}, {0}, {2}, 4); }).find("has_initial_state[0]=2"), std::string::npos);
  const MixerBatch md = MixerBatch::build({3, 0, 1}, {2, 0, 1}, {0, 1, 1}, 3);
  EXPECT_EQ(md.num_tokens, 4);
  EXPECT_EQ(md.query_start_loc, (std::vector<int32_t>{0, 3, 3, 4}));
}

TEST(MixerState, SlotAccessIsChecked) {
  MambaStateCache cache(MixerConfig::from_dims(MambaType::short_conv, {{"d_inner", 4}, {"d_conv", 3}}), 2);
  EXPECT_EQ(cache.ssm_slot_floats(), 0);
  EXPECT_EQ(cache.conv_slot_floats(), 8);
  cache.conv_slot(1)[0] = 3.0f;
  cache.copy_slot(1, 0);
  EXPECT_EQ(cache.conv_slot(0)[0], 3.0f);
  cache.reset_slot(0);
  EXPECT_EQ(cache.conv_slot(0)[0], 0.0f);
  EXPECT_NE(error_message([&] { cache.conv_slot(2); }).find("slot=2"), std::string::npos);
  EXPECT_NE(error_message([&] { cache.copy_slot(0, -1); }).find("dst=-1"), std::string::npos);
}

}  // namespace
}  // namespace attn
