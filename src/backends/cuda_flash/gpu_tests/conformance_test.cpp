// cuda_flash on a GPU against the fp64 reference (tests/support), through the registry and
// plan / run over device-resident KVCaches (Registry::allocator). Without a usable device every
// test skips with the module's own reason.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>

#include "attn/attn.hpp"
#include "backends/cuda_flash/cuda_flash.hpp"
#include "support/test_support.hpp"

namespace attn {
namespace {

using test::CaseSpec;
using test::SeqShape;

std::shared_ptr<DeviceAllocator> gpu() { return Registry::instance().allocator(DeviceKind::cuda); }

// A device copy of a host buffer, and a view of it as a CUDA tensor of the buffer's shape.
struct DeviceTensor {
  DeviceMemory mem;
  TensorView view;
  explicit DeviceTensor(const Buffer& host) : mem(gpu(), host.bytes()), view(host.view()) {
    gpu()->copy(mem.data(), host.data(), host.bytes(), CopyKind::host_to_device);
    view.data = mem.data();
    view.device = DeviceKind::cuda;
  }
};

// Runs a prepared case (host cache written through the backend's write_kv) the way a server
// does: the cache copied once to a device KVCache, q / out on the GPU, plan then run through
// the registry's AttentionImpl. The output comes back into c.out; returns the plan.
std::shared_ptr<const StepPlan> run_on_gpu(test::Case& c) {
  KVCache cache(c.cache->spec(), gpu());
  cache.copy_from(*c.cache);
  DeviceTensor q(c.q), out(c.out);
  Workspace ws(gpu());
  auto plan = c.impl->plan(c.md, cache.spec());
  ForwardArgs args;
  args.q = q.view, args.out = out.view, args.cache = &cache, args.workspace = &ws;
  c.impl->run(*plan, args);
  gpu()->copy(c.out.data(), out.mem.data(), c.out.bytes(), CopyKind::device_to_host);  // waits for the kernels
  return plan;
}

test::CompareResult check_on_gpu(const CaseSpec& spec) {
  test::Case c = test::make_case(spec, "cuda_flash");
  run_on_gpu(c);
  return test::compare_output(c, test::reference_attention(c));
}

class CudaFlashGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    auto desc = Registry::instance().find("cuda_flash");
    ASSERT_TRUE(desc) << "cuda_flash is not registered";
    std::string why;
    if (!Registry::instance().ensure_module(*desc, why)) GTEST_SKIP() << "no usable GPU: " << why;
  }
};

LayerConfig layer(int heads, int kv_heads, int head_size, DType dtype, KVCacheDType kv = KVCacheDType::auto_) {
  LayerConfig c;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_size = head_size;
  c.dtype = dtype;
  c.kv_cache_dtype = kv;
  return c;
}

// Mixed batch: decode, chunked prefill, prefill from scratch, odd lengths around block edges.
std::vector<SeqShape> mixed_batch() { return {{0, 1}, {40, 1}, {577, 1}, {15, 17}, {0, 97}, {33, 7}, {16, 1}, {250, 64}}; }

void expect_matches(const CaseSpec& spec) {
  const auto r = check_on_gpu(spec);
  EXPECT_TRUE(r.ok) << spec.describe() << "\n" << spec.config.to_string() << "\n" << r.message;
}

TEST_F(CudaFlashGpu, HeadSizesAndDtypes) {
  for (DType dt : {DType::float16, DType::bfloat16})
    for (int d : {64, 72, 96, 128, 136, 200, 256}) {
      CaseSpec s;
      s.config = layer(8, 2, d, dt);
      s.seqs = mixed_batch();
      s.seed = test::fresh_seed();
      expect_matches(s);
    }
}

TEST_F(CudaFlashGpu, GqaRatios) {
  // 1 (MHA), 4, 8, and 16 / MQA, which exceed one CTA's 8-head slice.
  for (auto [h, kvh] : std::vector<std::pair<int, int>>{{4, 4}, {16, 4}, {16, 2}, {32, 2}, {16, 1}}) {
    CaseSpec s;
    s.config = layer(h, kvh, 128, DType::bfloat16);
    s.seqs = mixed_batch();
    s.seed = test::fresh_seed();
    expect_matches(s);
  }
}

TEST_F(CudaFlashGpu, Fp8CacheWithScales) {
  for (bool per_head : {false, true})
    for (DType dt : {DType::float16, DType::bfloat16})
      for (int d : {64, 128, 72}) {
        CaseSpec s;
        s.config = layer(8, 2, d, dt, KVCacheDType::fp8_e4m3);
        s.config.use_per_head_quant_scales = per_head;
        s.per_head_scales = per_head;
        s.seqs = mixed_batch();
        s.seed = test::fresh_seed();
        expect_matches(s);
      }
}

TEST_F(CudaFlashGpu, FeaturesAloneAndCombined) {
  for (int mask = 1; mask < 8; ++mask) {
    CaseSpec s;
    s.config = layer(16, 4, 64, DType::bfloat16);
    if (mask & 1) s.config.sliding_window = 37;
    if (mask & 2) s.config.logits_soft_cap = 5.0f;
    if (mask & 4) s.config.has_sink = true;
    s.value_range = 2.0f;  // larger logits so the soft-cap bites
    s.seqs = mixed_batch();
    s.seed = test::fresh_seed();
    expect_matches(s);
  }
}

TEST_F(CudaFlashGpu, AliasedPrefixBlocksAndBlockSizes) {
  for (int bs : {16, 32, 64}) {
    CaseSpec s;
    s.config = layer(8, 2, 128, DType::float16);
    s.block_size = bs;
    s.alias_prefix = true;
    s.seqs = {{300, 1}, {300, 5}, {200, 1}, {129, 40}};
    s.seed = test::fresh_seed();
    expect_matches(s);
  }
}

TEST_F(CudaFlashGpu, LongDecodeSplitsAndMergesDeterministically) {
  CaseSpec s;
  s.config = layer(32, 8, 128, DType::bfloat16);
  s.seqs = {{5000, 1}};
  s.seed = test::fresh_seed();
  auto c = test::make_case(s, "cuda_flash");
  const auto plan = run_on_gpu(c);
  auto r = test::compare_output(c, test::reference_attention(c));
  EXPECT_TRUE(r.ok) << s.describe() << "\n" << r.message;
  const auto* cuda_plan = dynamic_cast<const cuda_flash::CudaStepPlan*>(plan.get());
  ASSERT_NE(cuda_plan, nullptr);
  EXPECT_GT(cuda_plan->decode_splits, 1) << "a single long sequence should be split over the SMs: " << plan->to_string();
  const Buffer first(c.out.dtype(), c.out.shape());
  std::memcpy(first.data(), c.out.data(), c.out.bytes());
  run_on_gpu(c);
  EXPECT_EQ(std::memcmp(first.data(), c.out.data(), c.out.bytes()), 0) << "repeated runs must be bitwise equal";
}

// New K/V written by run (ForwardArgs::new_k / new_v) store what KVCache::write stores, and one
// plan serves two layers: each layer's output equals its own one-call run.
TEST_F(CudaFlashGpu, RunWritesNewKvAndOnePlanServesTwoLayers) {
  for (KVCacheDType kv : {KVCacheDType::auto_, KVCacheDType::fp8_e4m3}) {
    CaseSpec s;
    s.config = layer(8, 2, 128, DType::bfloat16, kv);
    s.seqs = mixed_batch();
    s.seed = test::fresh_seed();
    auto c = test::make_case(s, "cuda_flash");
    const auto& cfg = s.config;
    const int T = c.md.num_tokens;
    Buffer k(cfg.dtype, {T, cfg.num_kv_heads, cfg.head_size}), v(cfg.dtype, {T, cfg.num_kv_heads, cfg.head_size});
    for (int64_t i = 0; i < k.view().numel(); ++i) {
      store_from_float(k.data(), k.dtype(), i, 0.01f * float(i % 97) - 0.4f);
      store_from_float(v.data(), v.dtype(), i, 0.02f * float(i % 89) - 0.7f);
    }
    KVCache want(c.cache->spec());
    want.copy_from(*c.cache);
    want.write(k.view(), v.view(), c.md);

    KVCache layer0(c.cache->spec(), gpu()), layer1(c.cache->spec(), gpu());
    layer0.copy_from(*c.cache);
    layer1.copy_from(want);
    DeviceTensor q(c.q), out0(c.out), out1(c.out), dk(k), dv(v);
    Workspace ws(gpu());
    const auto plan = c.impl->plan(c.md, layer0.spec());
    ForwardArgs a0;
    a0.q = q.view, a0.out = out0.view, a0.cache = &layer0, a0.new_k = dk.view, a0.new_v = dv.view, a0.workspace = &ws;
    ForwardArgs a1;
    a1.q = q.view, a1.out = out1.view, a1.cache = &layer1, a1.workspace = &ws;
    c.impl->run(*plan, a0);
    c.impl->run(*plan, a1);
    KVCache back(c.cache->spec());
    back.copy_from(layer0);
    EXPECT_EQ(std::memcmp(back.data(), want.data(), back.bytes()), 0)
        << "run's write of new K/V must store what KVCache::write stores (" << to_string(kv) << ")";
    Buffer o0(c.out.dtype(), c.out.shape()), o1(c.out.dtype(), c.out.shape());
    gpu()->copy(o0.data(), out0.mem.data(), o0.bytes(), CopyKind::device_to_host);
    gpu()->copy(o1.data(), out1.mem.data(), o1.bytes(), CopyKind::device_to_host);
    EXPECT_EQ(std::memcmp(o0.data(), o1.data(), o0.bytes()), 0) << "write-then-attend differs from attending the written cache";
  }
}

TEST_F(CudaFlashGpu, BadInputsAreErrorsNotCrashes) {
  LayerParams p;
  p.config = layer(8, 2, 128, DType::bfloat16);
  auto impl = Registry::instance().create("cuda_flash", p);
  KVCacheSpec spec = Registry::instance().find("cuda_flash")->cache_spec(p.config, 4, 16);
  KVCache cache(spec, gpu()), host_cache(spec);
  auto md = BatchMetadata::build({{0, 3, {0}}}, 16, 4);
  Buffer q(DType::bfloat16, {3, 8, 128}), out(DType::bfloat16, {3, 8, 128});
  DeviceTensor dq(q), dout(out);
  auto error_of = [&](const BatchMetadata& m, const TensorView& qv, KVCache& kvc) {
    try {
      ForwardArgs a;
      a.q = qv, a.out = dout.view, a.cache = &kvc;
      impl->forward(m, a);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // Host q, a host cache, a block id out of range, a wrong head count.
  EXPECT_NE(error_of(md, q.view(), cache).find("q.device"), std::string::npos);
  EXPECT_NE(error_of(md, dq.view, host_cache).find("cache.device"), std::string::npos);
  BatchMetadata bad = md;
  bad.block_table[0] = 9;
  EXPECT_NE(error_of(bad, dq.view, cache).find("block_table"), std::string::npos);
  Buffer q_bad(DType::bfloat16, {3, 4, 128});
  DeviceTensor dq_bad(q_bad);
  EXPECT_NE(error_of(md, dq_bad.view, cache).find("q.shape"), std::string::npos);
}

}  // namespace
}  // namespace attn
