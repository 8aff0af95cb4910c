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

/// The layouts cpu_flash reads that `spec` can use: the pair order where its sizes allow it
/// (whatever the dtypes: kernels without a pair path gather rows), and HND rows.
std::vector<KVLayout> layouts_for(const CaseSpec& spec) {
  const LayerConfig& c = spec.config;
  const int dv = c.effective_head_size_v();
  if (c.head_size % 2 || dv % 2 || spec.block_size % 16) return {KVLayout::HND};
  return {KVLayout::HND_PAIRS, KVLayout::HND};
}

void expect_all_variants(const CaseSpec& spec) {
  for (KVLayout layout : layouts_for(spec)) {
    CaseSpec s = spec;
    s.layout = layout;
    for (Isa isa : variants()) {
      ForceIsa force(isa);
      const auto r = attn::test::check_backend(s, "cpu_flash");
      EXPECT_TRUE(r.ok) << "variant " << to_string(isa) << ": " << r.message << "\n  " << s.describe();
    }
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

TEST(CpuFlashConformance, PairLayoutDecodeShapes) {
  // The pair decode kernel's shapes (bf16 q and cache): GQA 1 / 4 / 8, head sizes it serves and
  // ones it leaves to the general kernel (80: not whole 32-dim lines; 63: odd, HND only), every
  // block size, ragged decode-heavy batches with split ranges, and a prefill in the mix.
  struct Shape {
    int heads, kv_heads, head_size, block_size;
  };
  std::vector<Shape> shapes = {{4, 4, 64, 16}, {8, 2, 128, 32}, {16, 2, 128, 64}, {8, 2, 256, 128},
                               {16, 2, 64, 128}, {8, 2, 80, 32}, {8, 2, 63, 16}};
  if (quick()) shapes = {{8, 2, 128, 64}, {8, 2, 80, 16}};
  for (const Shape& sh : shapes) {
    CaseSpec spec;
    spec.config = layer(sh.heads, sh.kv_heads, sh.head_size, DType::bfloat16);
    spec.block_size = sh.block_size;
    spec.seqs = {{0, 1}, {5, 1}, {sh.block_size - 1, 1}, {3 * sh.block_size + 7, 1}, {1500, 1}, {2100, 2}, {37, 19}};
    spec.seed = attn::test::fresh_seed();
    SCOPED_TRACE("heads " + std::to_string(sh.heads) + "/" + std::to_string(sh.kv_heads) + " head_size " +
                 std::to_string(sh.head_size) + " block_size " + std::to_string(sh.block_size));
    expect_all_variants(spec);
  }
}

TEST(CpuFlashConformance, PairLayoutWindowsAndSinks) {
  // Windows start inside K lines and split ranges, so the pair kernel's chunks hold keys before
  // the window (masked, their V halves zeroed); sinks and soft-cap on the same items.
  for (int window : {1, 13, 40, 1030}) {
    for (int block_size : {16, 64}) {
      CaseSpec spec;
      spec.config = layer(8, 2, 128, DType::bfloat16);
      spec.config.sliding_window = window;
      spec.config.has_sink = true;
      spec.config.logits_soft_cap = window == 13 ? 1.5f : 0.0f;
      spec.block_size = block_size;
      spec.seqs = {{40, 1}, {1100, 1}, {2050, 1}, {25, 9}};
      spec.value_range = 2.0f;
      spec.seed = attn::test::fresh_seed();
      SCOPED_TRACE("window " + std::to_string(window) + " block_size " + std::to_string(block_size));
      expect_all_variants(spec);
    }
  }
}

TEST(CpuFlashConformance, EngineStridedRows) {
  // vLLM's own cache (per-token [K | V] rows, head- or token-major blocks, read in place at the
  // engine's strides): mixed batches, every KV dtype, GQA, head sizes with tails, the features.
  struct Shape { int heads, kv_heads, d; DType io; KVCacheDType kv; int block_size; };
  const Shape shapes[] = {{8, 2, 64, DType::float32, KVCacheDType::auto_, 16},
                          {8, 2, 128, DType::bfloat16, KVCacheDType::auto_, 32},
                          {4, 4, 80, DType::float16, KVCacheDType::auto_, 16},
                          {8, 1, 128, DType::bfloat16, KVCacheDType::fp8_e4m3, 32},
                          {6, 2, 100, DType::bfloat16, KVCacheDType::fp8_e5m2, 16}};
  for (const Shape& sh : shapes)
    for (auto strided : {CaseSpec::Strided::head_major, CaseSpec::Strided::token_major})
      for (const Feature* f : {static_cast<const Feature*>(nullptr), &features()[0], &features()[1], &features()[3]}) {
        CaseSpec spec;
        spec.config = layer(sh.heads, sh.kv_heads, sh.d, sh.io);
        spec.config.kv_cache_dtype = sh.kv;
        if (f) f->apply(spec.config);
        spec.block_size = sh.block_size;
        spec.strided = strided;
        spec.seqs = mixed_batch(sh.block_size);
        spec.value_range = 2.0f;
        spec.seed = attn::test::fresh_seed();
        for (Isa isa : variants()) {
          ForceIsa force(isa);
          const auto r = attn::test::check_backend(spec, "cpu_flash");
          EXPECT_TRUE(r.ok) << "variant " << to_string(isa) << " " << (f ? f->name : "plain") << ": " << r.message << "\n  "
                            << spec.describe();
        }
      }
}

}  // namespace
}  // namespace attn::cpu_flash::test
