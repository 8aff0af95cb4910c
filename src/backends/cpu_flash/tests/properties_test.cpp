// cpu_flash properties beyond accuracy: bitwise determinism, batch invariance (batch
// composition and thread count), the ISA override, the plan, and the declared capabilities.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <utility>

#include "attn/registry.hpp"
#include "backends/cpu_flash/plan.hpp"
#include "backends/cpu_flash/tests/cpu_flash_test_util.hpp"
#include "support/cpu_isa_env.hpp"
#include "support/test_support.hpp"

namespace attn::cpu_flash::test {
namespace {

using attn::test::Case;
using attn::test::CaseSpec;

CaseSpec batch_spec(DType io, KVCacheDType kv) {
  CaseSpec spec;
  spec.config.num_heads = 8, spec.config.num_kv_heads = 2, spec.config.head_size = 128;
  spec.config.dtype = io, spec.config.kv_cache_dtype = kv;
  spec.config.sliding_window = 700;
  spec.config.has_sink = true;
  spec.seqs = {{2500, 1}, {30, 40}, {1800, 1}, {0, 130}};
  spec.seed = attn::test::fresh_seed();
  return spec;
}

/// Output rows [t0, t0 + n) as raw bytes.
std::vector<char> rows(const Buffer& out, int t0, int n) {
  const std::size_t row = std::size_t(out.shape()[1] * out.shape()[2]) * dtype_size(out.dtype());
  const char* p = static_cast<const char*>(out.data()) + row * std::size_t(t0);
  return std::vector<char>(p, p + row * std::size_t(n));
}

/// Runs sequence `s` of case `c` alone (same cache, same q rows) with `threads` threads.
std::vector<char> run_alone(const Case& c, int s, int threads) {
  const BatchMetadata& md = c.md;
  std::vector<int32_t> table(md.blocks(s), md.blocks(s) + md.max_blocks_per_seq);
  while (!table.empty() && table.back() < 0) table.pop_back();
  const int qlen = md.query_len(s);
  BatchMetadata one = BatchMetadata::build({SequenceSpec{md.context_len(s), qlen, table}}, md.block_size,
                                           c.cache->spec().num_blocks, md.causal);
  const int64_t H = c.q.shape()[1], D = c.q.shape()[2], Dv = c.out.shape()[2];
  const std::size_t es = dtype_size(c.q.dtype());
  Buffer q(c.q.dtype(), {qlen, H, D}), out(c.out.dtype(), {qlen, H, Dv});
  std::memcpy(q.data(), static_cast<const char*>(c.q.data()) + std::size_t(md.query_start_loc[s]) * H * D * es, q.bytes());
  LayerParams p = c.params;
  p.num_threads = threads;
  auto impl = Registry::instance().create("cpu_flash", p);
  impl->forward(q.view(), *c.cache, one, out.view());
  return rows(out, 0, qlen);
}

TEST(CpuFlashProperties, RepeatedRunsAreBitwiseEqual) {
  for (Isa isa : variants()) {
    ForceIsa force(isa);
    Case c = attn::test::make_case(batch_spec(DType::bfloat16, KVCacheDType::auto_), "cpu_flash");
    attn::test::run_forward(c);
    const auto first = rows(c.out, 0, c.md.num_tokens);
    attn::test::run_forward(c);
    EXPECT_EQ(first, rows(c.out, 0, c.md.num_tokens)) << to_string(isa) << " " << c.spec.describe();
  }
}

TEST(CpuFlashProperties, BatchInvariantAcrossCompositionAndThreads) {
  for (KVCacheDType kv : {KVCacheDType::auto_, KVCacheDType::fp8_e4m3}) {
    for (Isa isa : variants()) {
      ForceIsa force(isa);
      CaseSpec spec = batch_spec(DType::bfloat16, kv);
      spec.config.use_batch_invariant = true;
      spec.num_threads = 2;
      Case c = attn::test::make_case(spec, "cpu_flash");
      attn::test::run_forward(c);
      for (int s = 0; s < c.md.num_seqs; ++s) {
        const auto in_batch = rows(c.out, c.md.query_start_loc[s], c.md.query_len(s));
        EXPECT_EQ(in_batch, run_alone(c, s, 1)) << "seq " << s << " alone, 1 thread, " << to_string(isa) << " " << spec.describe();
        EXPECT_EQ(in_batch, run_alone(c, s, 2)) << "seq " << s << " alone, 2 threads, " << to_string(isa);
      }
    }
  }
}

TEST(CpuFlashProperties, IsaOverrideIsHonouredAndChecked) {
  LayerParams p;
  p.config.num_heads = 4, p.config.num_kv_heads = 1, p.config.head_size = 64;
  for (Isa isa : variants()) {
    ForceIsa force(isa);
    EXPECT_EQ(Registry::instance().create("cpu_flash", p)->variant(), to_string(isa));
    EXPECT_EQ(Registry::instance().find("cpu_flash")->variant(detect_cpu(), p.config), to_string(isa));
  }
  {
    ForceIsa force("avx512_bf16");
    EXPECT_EQ(Registry::instance().find("cpu_flash")->variant(parse_platform("cpu:avx2"), LayerConfig{}), "avx2")
        << "a forced variant is capped at what the platform runs";
  }
  ForceIsa bad("sse9");
  try {
    Registry::instance().create("cpu_flash", p);
    FAIL() << "an unknown ATTN_CPU_ISA must be rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ATTN_CPU_ISA=sse9"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("avx2"), std::string::npos) << e.what();
  }
}

TEST(CpuFlashPlan, SplitsLongDecodeAtFixedPositionsOnly) {
  // The plan reads lengths only; the block ids are distinct because build() requires that of blocks a step writes.
  std::vector<int32_t> decode_blocks(64), prefill_blocks(4);
  std::iota(decode_blocks.begin(), decode_blocks.end(), 0);
  std::iota(prefill_blocks.begin(), prefill_blocks.end(), 64);
  const BatchMetadata md = BatchMetadata::build({{4095, 1, decode_blocks}, {0, 200, prefill_blocks}}, 64, 68, true);
  const Plan plan = make_plan(md, PlanShape{4, 8, 128, 0, true});
  // Decode: 4096 keys / 1024 per split × 8 KV heads; prefill: 200 tokens / 16 per tile × 8 heads.
  ASSERT_EQ(plan.merges.size(), 8u);
  for (const Merge& m : plan.merges) EXPECT_EQ(m.count, 4);
  int split = 0, whole = 0;
  for (const WorkItem& it : plan.items) {
    if (it.partial >= 0) {
      ++split;
      EXPECT_EQ(it.kv_begin % 1024, 0);
      EXPECT_EQ(it.kv_end - it.kv_begin, 1024);
    } else {
      ++whole;
      EXPECT_EQ(it.kv_end, it.q_end) << "causal: a prefill tile sees keys up to its last query";
    }
  }
  EXPECT_EQ(split, 32);
  EXPECT_EQ(whole, 13 * 8);
  EXPECT_EQ(plan.partial_floats, 32 * partial_floats(4, 128));
  // One (sequence, KV head) after another, each one's items largest first.
  for (std::size_t i = 1; i < plan.items.size(); ++i) {
    const WorkItem &a = plan.items[i - 1], &b = plan.items[i];
    if (a.seq == b.seq && a.kv_head == b.kv_head)
      EXPECT_GE(a.cost, b.cost) << i;
    else
      EXPECT_LT(std::pair(a.seq, a.kv_head), std::pair(b.seq, b.kv_head)) << i;
  }
}

TEST(CpuFlashPlan, WindowAndCausalBoundTheKeys) {
  PlanShape shape{1, 1, 64, 100, true};
  int32_t lo, hi;
  visible_keys(1000, 500, 563, shape, lo, hi);
  EXPECT_EQ(lo, 401);
  EXPECT_EQ(hi, 564);
  shape.causal = false;
  visible_keys(1000, 500, 563, shape, lo, hi);
  EXPECT_EQ(hi, 1000);
}

TEST(CpuFlashCapabilities, DeclaredExactly) {
  auto desc = Registry::instance().find("cpu_flash");
  ASSERT_TRUE(desc);
  const Platform& cpu = detect_cpu();
  LayerConfig ok;
  ok.num_heads = 32, ok.num_kv_heads = 8, ok.head_size = 128;
  EXPECT_TRUE(check_capabilities(desc->caps, ok, cpu).empty());
  EXPECT_LT(desc->priority, Registry::instance().find("reference")->priority);

  auto reasons_for = [&](void (*edit)(LayerConfig&)) {
    LayerConfig c = ok;
    edit(c);
    std::vector<std::string> fields;
    for (const Reason& r : check_capabilities(desc->caps, c, cpu)) fields.push_back(r.field);
    return fields;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(reasons_for([](LayerConfig& c) { c.head_size = 257; }), V{"head_size"});
  EXPECT_EQ(reasons_for([](LayerConfig& c) { c.head_size = 264; }), V{"head_size"});
  for (int d : {1, 8, 16, 20, 24, 100, 136, 255, 256}) {  // every size up to 256: tails included
    LayerConfig c = ok;
    c.head_size = d;
    EXPECT_TRUE(check_capabilities(desc->caps, c, cpu).empty()) << "head_size " << d;
  }
  EXPECT_EQ(reasons_for([](LayerConfig& c) { c.head_size_v = 64; }), V{"head_size_v"});
  EXPECT_EQ(reasons_for([](LayerConfig& c) { c.kv_cache_dtype = KVCacheDType::fp8_ds_mla; }), V{"kv_cache_dtype"});
  EXPECT_TRUE(reasons_for([](LayerConfig& c) { c.kv_cache_dtype = KVCacheDType::nvfp4; }).empty());
  EXPECT_EQ(reasons_for([](LayerConfig& c) { c.kv_cache_dtype = KVCacheDType::nvfp4, c.head_size = 72; }), V{"head_size"});
  EXPECT_TRUE(reasons_for([](LayerConfig& c) { c.head_size = 72; }).empty());
  EXPECT_TRUE(reasons_for([](LayerConfig& c) { c.block_size = 7; }).empty());
  EXPECT_TRUE(reasons_for([](LayerConfig& c) {
                c.has_sink = true, c.sliding_window = 128, c.logits_soft_cap = 30, c.use_alibi = true;
                c.use_batch_invariant = true, c.use_per_head_quant_scales = true, c.kv_cache_dtype = KVCacheDType::fp8;
              }).empty());
}

TEST(CpuFlashCapabilities, CacheLayoutIsPairsForBf16ProductsOnly) {
  // The descriptor's kv_layout_rule: HND_PAIRS for bf16 q on bf16 / fp8 storage with sizes the
  // pairs fit on a CPU whose pair kernels run (AVX-512 BF16), HND rows for every other cache.
  auto desc = Registry::instance().find("cpu_flash");
  ASSERT_TRUE(desc);
  LayerConfig c;
  c.num_heads = 32, c.num_kv_heads = 8, c.head_size = 128, c.dtype = DType::bfloat16;
  const Platform bf16_cpu = parse_platform("cpu:avx512_bf16");
  auto layout = [&](int32_t block_size) { return desc->cache_spec(c, 8, block_size, &bf16_cpu).layout; };
  EXPECT_EQ(layout(0), KVLayout::HND_PAIRS);  // its preferred block size, 64
  EXPECT_EQ(desc->cache_spec(c, 8, 0, &bf16_cpu).block_size, 64);
  // Without AVX-512 BF16 the general kernel would gather the pairs back into rows: HND rows.
  for (const char* spec : {"cpu:avx2", "cpu:avx512", "cpu:generic"}) {
    const Platform p = parse_platform(spec);
    EXPECT_EQ(desc->cache_spec(c, 8, 64, &p).layout, KVLayout::HND) << spec;
  }
  {  // This machine as ATTN_CPU_ISA caps it: a forced AVX2 run's caches are rows too.
    attn::test::ForceCpuIsa avx2(cpu::Isa::avx2);
    EXPECT_EQ(desc->cache_spec(c, 8, 64).layout, KVLayout::HND);
  }
  const std::optional<cpu::Isa> forced = cpu::forced_isa();  // the test run's own ATTN_CPU_ISA, if any
  const bool pairs_here = detect_cpu().has(CpuFeature::avx512_bf16) && (!forced || *forced >= cpu::Isa::avx512_bf16);
  const KVLayout here = pairs_here ? KVLayout::HND_PAIRS : KVLayout::HND;
  EXPECT_EQ(desc->cache_spec(c, 8, 64).layout, here);
  for (auto kv : {KVCacheDType::auto_, KVCacheDType::bfloat16, KVCacheDType::fp8, KVCacheDType::fp8_e4m3, KVCacheDType::fp8_e5m2}) {
    c.kv_cache_dtype = kv;
    EXPECT_EQ(layout(16), KVLayout::HND_PAIRS) << to_string(kv);
  }
  c.kv_cache_dtype = KVCacheDType::float16;
  EXPECT_EQ(layout(16), KVLayout::HND);
  c.kv_cache_dtype = KVCacheDType::auto_;
  for (DType q : {DType::float16, DType::float32}) {
    c.dtype = q;
    EXPECT_EQ(layout(16), KVLayout::HND) << to_string(q);
    c.kv_cache_dtype = KVCacheDType::fp8_e4m3;  // fp8 storage under a non-bf16 q: row kernels
    EXPECT_EQ(layout(16), KVLayout::HND) << to_string(q);
    c.kv_cache_dtype = KVCacheDType::auto_;
  }
  c.dtype = DType::bfloat16, c.head_size = 80;
  EXPECT_EQ(layout(16), KVLayout::HND_PAIRS);
  EXPECT_EQ(layout(8), KVLayout::HND);
  EXPECT_EQ(layout(24), KVLayout::HND);
  c.head_size = 63;
  EXPECT_EQ(layout(16), KVLayout::HND);
  c.head_size = 64, c.head_size_v = 63;  // an odd V width
  EXPECT_EQ(layout(16), KVLayout::HND);
  for (int32_t head : {63, 64, 80})  // whatever it chooses, the spec is a valid cache
    for (int32_t bs : {8, 16, 24, 64}) {
      c.head_size = head, c.head_size_v = 0;
      EXPECT_NO_THROW(desc->cache_spec(c, 8, bs).validate()) << head << " " << bs;
    }
}

TEST(CpuFlashErrors, BadArgumentsThrowNamingTheArgument) {
  LayerParams p;
  p.config.num_heads = 4, p.config.num_kv_heads = 1, p.config.head_size = 264;
  try {
    Registry::instance().create("cpu_flash", p);
    FAIL() << "head_size 264 must be rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head_size=264"), std::string::npos) << e.what();
  }
  CaseSpec spec;
  spec.config.num_heads = 4, spec.config.num_kv_heads = 1, spec.config.head_size = 64;
  spec.seqs = {{5, 2}};
  Case c = attn::test::make_case(spec, "cpu_flash");
  Buffer wrong(DType::float32, {3, 4, 64});  // md has 2 tokens
  EXPECT_THROW(c.impl->forward(wrong.view(), *c.cache, c.md, c.out.view()), Error);
}

}  // namespace
}  // namespace attn::cpu_flash::test
