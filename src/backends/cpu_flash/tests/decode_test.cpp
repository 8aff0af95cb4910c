// The decode kernel (items of ≤16 rows) against the fp64 reference under every ISA variant:
// head sizes it takes (multiples of 32, and 64 for the e4m3 table path), GQA groups up to 16
// rows, multi-token decode (rows with different causal limits inside one chunk), windows that
// start inside a chunk, block sizes that cut chunks short, contexts beyond one split, the
// per-token-head byte caches and the packed formats (nvfp4, turboquant, int4).
#include <gtest/gtest.h>

#include "backends/cpu_flash/tests/cpu_flash_test_util.hpp"
#include "support/test_support.hpp"

namespace attn::cpu_flash::test {
namespace {

using attn::test::CaseSpec;

void expect_all_variants(const CaseSpec& spec) {
  for (Isa isa : variants()) {
    ForceIsa force(isa);
    const auto r = attn::test::check_backend(spec, "cpu_flash");
    EXPECT_TRUE(r.ok) << "variant " << to_string(isa) << ": " << r.message << "\n  " << spec.describe();
  }
}

CaseSpec decode_case(int heads, int kv_heads, int d, DType io, KVCacheDType kv) {
  CaseSpec spec;
  spec.config.num_heads = heads, spec.config.num_kv_heads = kv_heads, spec.config.head_size = d;
  spec.config.dtype = io, spec.config.kv_cache_dtype = kv;
  spec.block_size = 64;
  spec.seqs = {{1, 1}, {63, 1}, {200, 1}, {1100, 1}, {37, 3}};
  if (!quick()) spec.seqs.push_back({2500, 2});
  spec.seed = attn::test::fresh_seed();
  return spec;
}

TEST(CpuFlashDecode, HeadSizesGroupsAndCacheTypes) {
  const int sizes[] = {64, 96, 128, 256};
  for (int d : sizes)
    for (int group : {1, 4, 8, 16})
      for (KVCacheDType kv : {KVCacheDType::auto_, KVCacheDType::fp8_e4m3}) {
        if (quick() && group == 8) continue;
        SCOPED_TRACE("d=" + std::to_string(d) + " group=" + std::to_string(group) + " kv=" + std::string(to_string(kv)));
        expect_all_variants(decode_case(2 * group, 2, d, DType::bfloat16, kv));
      }
}

TEST(CpuFlashDecode, IoTypesAndEveryCacheType) {
  for (DType io : {DType::float32, DType::float16, DType::bfloat16})
    for (KVCacheDType kv : {KVCacheDType::auto_, KVCacheDType::float16, KVCacheDType::bfloat16, KVCacheDType::fp8_e4m3,
                            KVCacheDType::fp8_e5m2}) {
      SCOPED_TRACE(std::string(to_string(io)) + " / " + std::string(to_string(kv)));
      CaseSpec spec = decode_case(8, 2, 128, io, kv);
      spec.per_head_scales = is_quantized(kv);
      spec.config.use_per_head_quant_scales = spec.per_head_scales;
      expect_all_variants(spec);
    }
}

// The byte formats on the pair kernels (bf16 q, head sizes of 32s): per-token-head codes with
// each slot's scales (int8 on integer dot products, e4m3 through the byte tables, int4 rotated),
// groups from one row to a 4-row tile and past it, a block that cuts chunks short, a window.
TEST(CpuFlashDecode, PerTokenHeadCaches) {
  for (KVCacheDType kv : {KVCacheDType::int8_per_token_head, KVCacheDType::fp8_per_token_head, KVCacheDType::int4_per_token_head})
    for (int d : {64, 128, 256})
      for (int group : {1, 4, 6}) {
        if (quick() && d == 256) continue;
        SCOPED_TRACE("d=" + std::to_string(d) + " group=" + std::to_string(group) + " kv=" + std::string(to_string(kv)));
        CaseSpec spec = decode_case(2 * group, 2, d, DType::bfloat16, kv);
        if (group == 6) spec.block_size = 48, spec.config.sliding_window = 70;
        spec.value_range = 2.0f;
        expect_all_variants(spec);
      }
}

// The packed formats' decode under every build: nvfp4 rows unpacked to bf16, turboquant slots to
// fp32 keys and bf16 value codes (e4m3 keys read in place), int4 on the pair kernel, each with
// bf16 q (the dot-product kernels) and fp32 / fp16 q (the general ones, on the 4-row tile);
// every head size among 64, 80 (an odd count of nvfp4 blocks) and 128 the format takes, groups
// from one row to past a 4-row tile, nvfp4's per-head global scales, a window and a block that
// cuts chunks short.
TEST(CpuFlashDecode, PackedCachesEveryBuild) {
  for (KVCacheDType kv : packed_kv_cache_dtypes())
    for (int d : {64, 80, 128}) {
      if (!kv_width_unmet(kv, d).empty()) continue;
      for (DType io : {DType::bfloat16, DType::float32, DType::float16})
        for (int group : {1, 4, 6}) {
          if ((io != DType::bfloat16 && group != 4) || (quick() && (io == DType::float16 || group == 1))) continue;
          SCOPED_TRACE("d=" + std::to_string(d) + " group=" + std::to_string(group) + " io=" + std::string(to_string(io)) +
                       " kv=" + std::string(to_string(kv)));
          CaseSpec spec = decode_case(2 * group, 2, d, io, kv);
          if (group == 6) spec.block_size = 48, spec.config.sliding_window = 70;
          if (is_nvfp4(kv) && group == 4) spec.per_head_scales = spec.config.use_per_head_quant_scales = true;
          spec.value_range = 2.0f;
          expect_all_variants(spec);
        }
    }
}

TEST(CpuFlashDecode, FeaturesWindowsAndShortBlocks) {
  for (int block : {16, 48})
    for (int feature = 0; feature < 5; ++feature) {
      CaseSpec spec = decode_case(16, 4, 128, DType::bfloat16, feature % 2 ? KVCacheDType::fp8_e4m3 : KVCacheDType::auto_);
      spec.block_size = block;
      LayerConfig& c = spec.config;
      if (feature == 0) c.sliding_window = 50;   // window edge inside a chunk
      if (feature == 1) c.sliding_window = 7, c.has_sink = true;
      if (feature == 2) c.logits_soft_cap = 5.0f;
      if (feature == 3) c.use_alibi = true;
      if (feature == 4) c.use_non_causal = true;
      spec.value_range = 2.0f;  // wider scores: the output is not an average of nearly equal weights
      SCOPED_TRACE("block=" + std::to_string(block) + " feature=" + std::to_string(feature));
      expect_all_variants(spec);
    }
}

}  // namespace
}  // namespace attn::cpu_flash::test
