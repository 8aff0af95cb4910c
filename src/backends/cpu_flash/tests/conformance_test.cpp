// cpu_flash against the fp64 reference, under every ISA variant this CPU runs: head sizes, GQA
// ratios, ragged mixed batches, block sizes, features alone and combined, every KV dtype.
#include <gtest/gtest.h>

#include "backends/cpu_flash/head_sizes.hpp"
#include "backends/cpu_flash/tests/cpu_flash_test_util.hpp"
#include "support/test_support.hpp"

namespace attn::cpu_flash::test {
namespace {

using attn::test::CaseSpec;
using attn::test::SeqShape;

LayerConfig layer(int heads, int kv_heads, int head_size, DType dtype = DType::float32) {
  LayerConfig c;
  c.num_heads = heads, c.num_kv_heads = kv_heads, c.head_size = head_size, c.dtype = dtype;
  return c;
}

/// A mixed step: decode, chunked prefill, fresh prefill, lengths around the block size.
std::vector<SeqShape> mixed_batch(int block_size) {
  return {{40, 1}, {0, 7}, {10, 17}, {block_size - 1, 1}, {0, block_size + 1}, {3, 2}};
}

void expect_all_variants(const CaseSpec& spec) {
  for (Isa isa : variants()) {
    ForceIsa force(isa);
    const auto r = attn::test::check_backend(spec, "cpu_flash");
    EXPECT_TRUE(r.ok) << "variant " << to_string(isa) << ": " << r.message << "\n  " << spec.describe();
  }
}

/// Every multiple of 8 up to kMaxHeadSize, and sizes that end in a partial vector on every ISA
/// (the tail path): below one AVX2 vector, between vectors, one short of and one past a whole one.
std::vector<int> head_sizes_to_check() {
  if (quick()) return {8, 24, 100, 128, 256};
  std::vector<int> sizes;
  for (int d = 8; d <= kMaxHeadSize; d += 8) sizes.push_back(d);
  sizes.insert(sizes.end(), {1, 3, 7, 12, 33, 47, 63, 65, 100, 127, 129, 250, 255});
  return sizes;
}

TEST(CpuFlashConformance, EveryHeadSize) {
  for (int d : head_sizes_to_check()) {
    SCOPED_TRACE("head_size " + std::to_string(d));
    CaseSpec spec;
    spec.config = layer(4, 2, d);
    spec.seqs = {{9, 1}, {0, 5}, {20, 3}};
    spec.seed = attn::test::fresh_seed();
    expect_all_variants(spec);
  }
}

TEST(CpuFlashConformance, TailHeadSizesEveryDtype) {
  // Partial vectors in the 16-bit and fp8 loads (bf16 dot products included), on decode rows
  // and prefill tiles alike.
  for (int d : {24, 40, 100, 136, 200})
    for (DType io : {DType::float16, DType::bfloat16})
      for (KVCacheDType kv : {KVCacheDType::auto_, KVCacheDType::fp8_e4m3, KVCacheDType::fp8_e5m2}) {
        CaseSpec spec;
        spec.config = layer(8, 2, d, io);
        spec.config.kv_cache_dtype = kv;
        spec.seqs = {{30, 1}, {0, 40}, {70, 3}};
        spec.seed = attn::test::fresh_seed();
        SCOPED_TRACE("head_size " + std::to_string(d) + " " + std::string(to_string(io)) + " / " + std::string(to_string(kv)));
        expect_all_variants(spec);
      }
}

TEST(CpuFlashConformance, GqaRatios) {
  for (auto [h, hkv] : std::vector<std::pair<int, int>>{{4, 4}, {8, 2}, {16, 2}, {8, 1}}) {
    CaseSpec spec;
    spec.config = layer(h, hkv, 64);
    spec.seqs = mixed_batch(16);
    spec.seed = attn::test::fresh_seed();
    expect_all_variants(spec);
  }
}

TEST(CpuFlashConformance, RaggedOddLengthsAndLongContexts) {
  CaseSpec spec;
  spec.config = layer(8, 2, 128, DType::bfloat16);
  spec.seqs = {{0, 1}, {0, 7}, {0, 17}, {0, 97}, {480, 97}, {15, 2}, {2900, 1}, {2000, 33}};
  if (quick()) spec.seqs = {{0, 7}, {0, 97}, {1300, 1}, {15, 2}};
  spec.seed = attn::test::fresh_seed();
  expect_all_variants(spec);
}

TEST(CpuFlashConformance, BlockSizesAndAliasedTables) {
  for (int bs : {1, 7, 16, 33, 64}) {
    for (bool alias : {false, true}) {
      CaseSpec spec;
      spec.config = layer(8, 2, 72);
      spec.seqs = {{3 * bs + 5, 1}, {3 * bs + 1, 9}, {2 * bs, 4}};
      spec.block_size = bs;
      spec.alias_prefix = alias;
      spec.seed = attn::test::fresh_seed();
      expect_all_variants(spec);
    }
  }
}

struct Feature {
  const char* name;
  void (*apply)(LayerConfig&);
};

const std::vector<Feature>& features() {
  static const std::vector<Feature> f = {
      {"sliding_window", [](LayerConfig& c) { c.sliding_window = 13; }},
      {"soft_cap", [](LayerConfig& c) { c.logits_soft_cap = 1.5f; }},
      {"alibi", [](LayerConfig& c) { c.use_alibi = true; }},
      {"sinks", [](LayerConfig& c) { c.has_sink = true; }},
      {"non_causal", [](LayerConfig& c) { c.use_non_causal = true; }},
      {"encoder_only", [](LayerConfig& c) { c.attn_type = AttnType::encoder_only; }},
  };
  return f;
}

TEST(CpuFlashConformance, EachFeatureAlone) {
  for (const Feature& f : features()) {
    CaseSpec spec;
    spec.config = layer(8, 2, 64);
    f.apply(spec.config);
    spec.seqs = {{40, 1}, {0, 30}, {25, 9}, {1100, 1}};
    spec.value_range = 2.0f;  // logits of a few units, so soft-cap and masks matter
    spec.seed = attn::test::fresh_seed();
    SCOPED_TRACE(f.name);
    expect_all_variants(spec);
  }
}

TEST(CpuFlashConformance, FeaturesCombined) {
  for (bool causal : {true, false}) {
    CaseSpec spec;
    spec.config = layer(8, 2, 96);
    for (const Feature& f : features())
      if (std::string(f.name) != "encoder_only") f.apply(spec.config);
    spec.config.use_non_causal = !causal;
    spec.seqs = {{40, 1}, {0, 30}, {25, 9}, {1100, 1}};
    spec.value_range = 2.0f;
    spec.seed = attn::test::fresh_seed();
    expect_all_variants(spec);
  }
}

TEST(CpuFlashConformance, EveryKvDtypeAndIoDtype) {
  for (DType io : {DType::float32, DType::float16, DType::bfloat16}) {
    for (KVCacheDType kv : {KVCacheDType::auto_, KVCacheDType::float16, KVCacheDType::bfloat16, KVCacheDType::fp8_e4m3,
                            KVCacheDType::fp8_e5m2}) {
      for (bool per_head : {false, true}) {
        if (!is_quantized(kv) && per_head) continue;
        CaseSpec spec;
        spec.config = layer(8, 2, 128, io);
        spec.config.kv_cache_dtype = kv;
        spec.config.use_per_head_quant_scales = per_head;
        spec.per_head_scales = per_head;
        spec.seqs = {{30, 1}, {0, 19}, {1040, 1}};
        spec.seed = attn::test::fresh_seed();
        SCOPED_TRACE(std::string(to_string(io)) + " / " + std::string(to_string(kv)));
        expect_all_variants(spec);
      }
    }
  }
}

}  // namespace
}  // namespace attn::cpu_flash::test
