// The prefill path (packed K/V, register-blocked Q·Kᵀ / P·V, fused softmax; items of up to 256
// keys on the short-range loop, longer ones tile by tile) against the fp64
// reference: lengths around the 64-key tile, GQA 1/4/8, window, sinks, soft-cap, non-causal,
// every KV dtype and head-size padding. ATTN_CPU_PREFILL=all routes every unsplit item, down
// to a single row, through it; `auto` is what users get.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "attn/registry.hpp"
#include "backends/cpu_flash/plan.hpp"
#include "backends/cpu_flash/prefill.hpp"
#include "backends/cpu_flash/tests/cpu_flash_test_util.hpp"
#include "support/test_support.hpp"

namespace attn::cpu_flash::test {
namespace {

using attn::test::CaseSpec;

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

/// The variants that have a prefill kernel (AVX-512 with and without bf16 dot products).
std::vector<Isa> prefill_variants() {
  std::vector<Isa> out;
  for (Isa isa : variants())
    if (isa >= Isa::avx512) out.push_back(isa);
  return out;
}

LayerConfig layer(int heads, int kv_heads, int head_size, DType dtype) {
  LayerConfig c;
  c.num_heads = heads, c.num_kv_heads = kv_heads, c.head_size = head_size, c.dtype = dtype;
  return c;
}

void expect_prefill(const CaseSpec& spec, const char* route = "all") {
  const std::vector<Isa> isas = prefill_variants();
  if (isas.empty()) GTEST_SKIP() << "no AVX-512 on this CPU: the prefill path is not built for it";
  ScopedEnv env("ATTN_CPU_PREFILL", route);
  for (Isa isa : isas) {
    ForceIsa force(isa);
    const auto r = attn::test::check_backend(spec, "cpu_flash");
    EXPECT_TRUE(r.ok) << "variant " << to_string(isa) << " route " << route << ": " << r.message << "\n  " << spec.describe();
  }
}

TEST(CpuFlashPrefill, LengthsAndGqaAgainstOracle) {
  std::vector<int> lengths = {1, 63, 64, 65, 300, 1100};
  if (quick()) lengths = {1, 63, 65, 300};
  for (int len : lengths)
    for (auto [h, hkv] : std::vector<std::pair<int, int>>{{4, 4}, {8, 2}, {8, 1}}) {
      for (DType io : {DType::bfloat16, DType::float32}) {
        if (len == 1100 && io == DType::float32) continue;  // the fp32 tiles are covered at 300
        CaseSpec spec;
        spec.config = layer(h, hkv, 64, io);
        spec.seqs = {{0, len}};
        spec.seed = attn::test::fresh_seed();
        SCOPED_TRACE("len " + std::to_string(len) + " heads " + std::to_string(h) + "/" + std::to_string(hkv));
        expect_prefill(spec);
      }
    }
}

TEST(CpuFlashPrefill, FeaturesAgainstOracle) {
  struct Feature {
    const char* name;
    void (*apply)(LayerConfig&);
  };
  const Feature features[] = {
      {"window", [](LayerConfig& c) { c.sliding_window = 50; }},
      {"window_128", [](LayerConfig& c) { c.sliding_window = 128; }},
      // Wider than the short-range path takes (256 keys): windows on the tile-by-tile loop.
      {"window_290", [](LayerConfig& c) { c.sliding_window = 290; }},
      {"sinks", [](LayerConfig& c) { c.has_sink = true; }},
      {"soft_cap", [](LayerConfig& c) { c.logits_soft_cap = 1.5f; }},
      {"non_causal", [](LayerConfig& c) { c.use_non_causal = true; }},
      {"all", [](LayerConfig& c) { c.sliding_window = 70, c.has_sink = true, c.logits_soft_cap = 2.0f; }},
      {"all_non_causal",
       [](LayerConfig& c) { c.sliding_window = 70, c.has_sink = true, c.logits_soft_cap = 2.0f, c.use_non_causal = true; }},
  };
  for (const Feature& f : features)
    for (DType io : {DType::bfloat16, DType::float32}) {
      CaseSpec spec;
      spec.config = layer(8, 2, 64, io);
      f.apply(spec.config);
      // A fresh prefill, a chunked prefill on a context, and a decode row (general kernel).
      spec.seqs = {{0, 300}, {70, 65}, {200, 1}, {10, 160}};
      if (quick()) spec.seqs = {{0, 300}, {70, 65}};
      spec.value_range = 2.0f;  // logits of a few units, so soft-cap and masks matter
      spec.seed = attn::test::fresh_seed();
      SCOPED_TRACE(std::string(f.name) + " " + std::string(to_string(io)));
      expect_prefill(spec);
      expect_prefill(spec, "auto");
    }
}

TEST(CpuFlashPrefill, EveryKvDtypeAndHeadSizePadding) {
  // The packed formats too: int4 / nvfp4 unpacked to bf16 tiles, turboquant slots to bf16 tiles
  // (bf16 q) or fp32 tiles, with q rotated.
  std::vector<KVCacheDType> kvs = {KVCacheDType::auto_, KVCacheDType::float16, KVCacheDType::bfloat16, KVCacheDType::fp8_e4m3,
                                   KVCacheDType::fp8_e5m2};
  for (KVCacheDType k : packed_kv_cache_dtypes()) kvs.push_back(k);
  for (DType io : {DType::float32, DType::float16, DType::bfloat16})
    for (KVCacheDType kv : kvs) {
      CaseSpec spec;
      spec.config = layer(8, 2, 128, io);
      spec.config.kv_cache_dtype = kv;
      spec.seqs = {{0, 130}, {33, 40}};
      spec.seed = attn::test::fresh_seed();
      SCOPED_TRACE(std::string(to_string(io)) + " / " + std::string(to_string(kv)));
      expect_prefill(spec);
    }
  for (int d : {8, 24, 32, 40, 72, 100, 101, 200, 256})  // odd sizes: fp32 tiles (bf16 pairs need an even size)
    for (int bs : {7, 16, 64}) {
      CaseSpec spec;
      spec.config = layer(4, 1, d, DType::bfloat16);
      spec.config.has_sink = true;
      spec.block_size = bs;
      spec.seqs = {{0, 90}, {bs + 3, 20}};
      spec.seed = attn::test::fresh_seed();
      SCOPED_TRACE("head_size " + std::to_string(d) + " block_size " + std::to_string(bs));
      expect_prefill(spec);
    }
}

TEST(CpuFlashPrefill, TurboQuantTilesSplitOnlyRotatedKeys) {
  // The step plan lays out the tiles from the cache's preset: turboquant_k8v4's e4m3 keys are
  // exact in bf16 tiles (no hi / lo halves, the same tile bytes as an fp8 cache); the 3 / 4-bit
  // presets' rotated-back keys take both halves where the tiles are bf16.
  if (prefill_variants().empty()) GTEST_SKIP() << "no AVX-512 on this CPU: the prefill path is not built for it";
  std::vector<int32_t> ids(8);
  for (int i = 0; i < 8; ++i) ids[std::size_t(i)] = i;
  const BatchMetadata md = BatchMetadata::build({{0, 256, ids}}, 32, 8);
  auto workspace = [&](KVCacheDType k) {
    LayerParams p;
    p.config = layer(8, 2, 128, DType::bfloat16);
    p.config.kv_cache_dtype = k;
    const auto impl = Registry::instance().create("cpu_flash", p);
    KVCacheSpec s;
    s.num_blocks = 8, s.block_size = 32, s.num_kv_heads = 2, s.head_size = 128, s.kv_cache_dtype = k;
    s.dtype = k == KVCacheDType::fp8_e4m3 ? DType::fp8_e4m3 : DType::int8;
    if (k != KVCacheDType::fp8_e4m3) s.layout = KVLayout::HND;
    return impl->plan(md, s)->workspace_bytes();
  };
  const std::size_t fp8 = workspace(KVCacheDType::fp8_e4m3), k8v4 = workspace(KVCacheDType::turboquant_k8v4);
  EXPECT_EQ(k8v4, fp8);
  if (best_isa(detect_cpu()) >= Isa::avx512_bf16) {
    EXPECT_GT(workspace(KVCacheDType::turboquant_4bit_nc), k8v4);
  }
}

TEST(CpuFlashPrefill, PackLayoutCoversOnlyVisibleTiles) {
  // gpt-oss-like: window 128, 2048 new tokens; every group packs all 32 tiles once, and the
  // decode-like items of another sequence stay on the general kernel.
  std::vector<int32_t> ids0(32), ids1(63);
  for (int i = 0; i < 32; ++i) ids0[std::size_t(i)] = i;
  for (int i = 0; i < 63; ++i) ids1[std::size_t(i)] = 32 + i;
  const BatchMetadata md = BatchMetadata::build({{0, 2048, ids0}, {4000, 1, ids1}}, 64, 95);
  KernelArgs a;
  a.group = 8, a.num_kv_heads = 8, a.num_heads = 64, a.head_size = 64, a.head_size_v = 64;
  a.q_dtype = DType::bfloat16, a.kv_type = KvType::bf16, a.window = 128;
  const Plan plan = make_plan(md, PlanShape{8, 8, 64, 128, true});
  const prefill::PackLayout L = prefill::plan_pack(a, plan, true, false, prefill::Route::auto_);
  EXPECT_TRUE(L.bf16);
  EXPECT_EQ(L.group(0, 0, 8).tiles, 32);
  EXPECT_EQ(L.group(1, 0, 8).offset, -1);
  EXPECT_EQ(L.jobs.size(), std::size_t(32 * 8));
  int prefill_items = 0;
  for (const WorkItem& it : plan.items) prefill_items += prefill::takes_prefill(L, a, it);
  EXPECT_EQ(prefill_items, 2048 / 8 * 8);
  // fp32 q or ALiBi: fp32 tiles / no prefill path.
  a.q_dtype = DType::float32;
  EXPECT_FALSE(prefill::plan_pack(a, plan, true, false, prefill::Route::auto_).bf16);
  const float slopes[64] = {};
  a.alibi_slopes = slopes;
  EXPECT_EQ(prefill::plan_pack(a, plan, true, false, prefill::Route::auto_).bytes, 0);
}

}  // namespace
}  // namespace attn::cpu_flash::test
