#include <gtest/gtest.h>

#include "attn/attn.hpp"
#include "support/test_support.hpp"

TEST(Smoke, ReferenceMatchesFp64) {
  attn::test::CaseSpec spec;
  spec.config.dtype = attn::DType::float32;
  spec.config.num_heads = 4;
  spec.config.num_kv_heads = 2;
  spec.config.head_size = 32;
  spec.seqs = {{0, 7}, {20, 1}, {5, 3}};
  spec.seed = attn::test::fresh_seed();
  auto r = attn::test::check_backend(spec, "reference");
  EXPECT_TRUE(r.ok) << r.message << "\n" << spec.describe();
}
