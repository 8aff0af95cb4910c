// cuda_flash without a GPU: its descriptor is in the core, so planning for a GPU target works
// anywhere; on a machine without a usable device, loading the module is a reason, not a crash.
// (Kernel conformance runs in attn_cuda_tests, which needs the module and a device.)
#include <gtest/gtest.h>

#include <algorithm>

#include "attn/attn.hpp"

namespace attn {
namespace {

LayerConfig llama_layer() {
  LayerConfig c;  // Llama-3.1-8B: 32 q heads, 8 KV heads, head 128, bf16
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_size = 128;
  c.dtype = DType::bfloat16;
  return c;
}

SelectOptions on(const std::string& platform) {
  SelectOptions o;
  o.platform = parse_platform(platform);
  o.use_env = false;
  return o;
}

const Candidate& candidate(const Decision& d, const std::string& name) {
  auto it = std::find_if(d.candidates.begin(), d.candidates.end(), [&](const Candidate& c) { return c.backend == name; });
  if (it == d.candidates.end()) throw Error("no candidate " + name + " in the decision");
  return *it;
}

bool has_reason(const Candidate& c, const std::string& field) {
  return std::any_of(c.reasons.begin(), c.reasons.end(), [&](const Reason& r) { return r.field == field; });
}

TEST(CudaFlashPlanning, HopperTargetPicksCudaFlash) {
  const Decision d = select(llama_layer(), on("cuda:9.0"));
  EXPECT_EQ(d.backend, "cuda_flash");
  EXPECT_EQ(d.block_size, 16);
  EXPECT_NE(d.variant.find("sm_90"), std::string::npos) << d.variant;
}

TEST(CudaFlashPlanning, AmpereAndAdaPickTheirCubins) {
  EXPECT_NE(select(llama_layer(), on("cuda:8.6")).variant.find("sm_80"), std::string::npos);
  EXPECT_NE(select(llama_layer(), on("cuda:8.9")).variant.find("sm_89"), std::string::npos);
  EXPECT_NE(select(llama_layer(), on("cuda:12.0")).variant.find("PTX"), std::string::npos);
}

TEST(CudaFlashPlanning, TuringIsRejectedWithTheComputeCapabilityReason) {
  const Decision d = explain(llama_layer(), on("cuda:7.5"));
  EXPECT_NE(d.backend, "cuda_flash");
  const Candidate& c = candidate(d, "cuda_flash");
  EXPECT_FALSE(c.valid);
  ASSERT_TRUE(has_reason(c, "compute_capability")) << d.to_text();
  for (const Reason& r : c.reasons)
    if (r.field == "compute_capability") {
      EXPECT_EQ(r.value, "7.5");
      EXPECT_NE(r.expected.find("8.0"), std::string::npos) << r.to_string();
    }
}

TEST(CudaFlashPlanning, DeclaredLimitsBecomeReasons) {
  struct Bad {
    const char* field;
    void (*apply)(LayerConfig&);
  };
  const Bad cases[] = {
      {"head_size", [](LayerConfig& c) { c.head_size = 48; }},
      {"head_size", [](LayerConfig& c) { c.head_size = 260; }},
      {"head_size", [](LayerConfig& c) { c.head_size = 100; }},
      {"dtype", [](LayerConfig& c) { c.dtype = DType::float32; }},
      {"kv_cache_dtype", [](LayerConfig& c) { c.kv_cache_dtype = KVCacheDType::fp8_e5m2; }},
      {"kv_cache_dtype", [](LayerConfig& c) { c.kv_cache_dtype = KVCacheDType::float16; }},  // bf16 model
      {"block_size", [](LayerConfig& c) { c.block_size = 8; }},
      {"use_alibi", [](LayerConfig& c) { c.use_alibi = true; }},
      {"use_mla", [](LayerConfig& c) { c.use_mla = true; c.kv_lora_rank = 512; c.qk_rope_head_dim = 64; c.head_size = 576; }},
  };
  for (const Bad& b : cases) {
    LayerConfig c = llama_layer();
    b.apply(c);
    const Decision d = explain(c, on("cuda:9.0"));
    EXPECT_TRUE(has_reason(candidate(d, "cuda_flash"), b.field)) << b.field << "\n" << d.to_text();
  }
}

TEST(CudaFlashPlanning, SupportedFeaturesAndSizesAreAccepted) {
  for (int hs = 64; hs <= 256; hs += 8) {
    LayerConfig c = llama_layer();
    c.head_size = hs;
    EXPECT_EQ(select(c, on("cuda:8.0")).backend, "cuda_flash") << hs;
  }
  LayerConfig c = llama_layer();
  c.kv_cache_dtype = KVCacheDType::fp8;
  c.use_per_head_quant_scales = true;
  c.sliding_window = 128;
  c.logits_soft_cap = 30.0f;
  c.has_sink = true;
  c.block_size = 32;
  EXPECT_EQ(select(c, on("cuda:9.0")).backend, "cuda_flash");
}

TEST(CudaFlashPlanning, ModuleWithoutDeviceIsAReasonNotACrash) {
  auto desc = Registry::instance().find("cuda_flash");
  ASSERT_TRUE(desc);
  EXPECT_EQ(desc->module, "attn_cuda");
  std::string why;
  Platform gpu;
  std::string no_gpu;
  const bool have_gpu = detect_cuda(gpu, no_gpu);
  const bool loaded = Registry::instance().ensure_module(*desc, why);
  if (have_gpu) GTEST_SKIP() << "a GPU is present (" << gpu.to_string() << "): attn_cuda_tests covers it";
  EXPECT_FALSE(loaded);
  EXPECT_FALSE(why.empty());
  // Without a device, creating the backend is an error carrying the reason ...
  LayerParams p;
  p.config = llama_layer();
  try {
    Registry::instance().create("cuda_flash", p);
    ADD_FAILURE() << "create succeeded without a device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
  // ... and so is planning on "the detected GPU".
  EXPECT_THROW(parse_platform("cuda"), Error);
}

}  // namespace
}  // namespace attn
