// The selector's MLA / sparse / block-sparse paths: which backend serves which layer, and the
// reasons given when a layer is forced onto one that cannot serve it.
#include <gtest/gtest.h>

#include "attn/attn.hpp"

namespace attn {
namespace {

LayerConfig deepseek_v2_lite() {
  return {.num_heads = 16, .num_kv_heads = 1, .head_size = 576, .head_size_v = 512, .use_mla = true,
          .kv_lora_rank = 512, .qk_rope_head_dim = 64, .qk_nope_head_dim = 128, .v_head_dim = 128};
}

LayerConfig deepseek_v32() {
  LayerConfig c = deepseek_v2_lite();
  c.num_heads = 128;
  c.use_sparse = true;
  c.index_topk = 2048;
  return c;
}

LayerConfig phi3_small_blocksparse() {
  return {.num_heads = 32, .num_kv_heads = 8, .head_size = 128, .use_block_sparse = true, .bs_block_size = 64,
          .bs_local_blocks = 16, .bs_vert_stride = 8};
}

SelectOptions forced(const std::string& backend) {
  SelectOptions o;
  o.backend = backend;
  o.use_env = false;
  return o;
}

SelectOptions automatic() {
  SelectOptions o;
  o.use_env = false;
  return o;
}

// The reasons `backend` gives for `cfg` (generic checker + its extra checks), by field.
std::vector<std::string> reason_fields(const std::string& backend, const LayerConfig& cfg) {
  auto d = Registry::instance().find(backend);
  EXPECT_TRUE(d) << backend;
  std::vector<Reason> r = check_capabilities(d->caps, cfg, detect_cpu());
  if (d->extra_checks) {
    auto more = d->extra_checks(cfg, detect_cpu());
    r.insert(r.end(), more.begin(), more.end());
  }
  std::vector<std::string> fields;
  for (const Reason& x : r) fields.push_back(x.field);
  return fields;
}

bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

std::string forced_error(const LayerConfig& cfg, const std::string& backend) {
  try {
    select(cfg, forced(backend));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MlaSelector, DeepSeekLayersPickTheirBackends) {
  EXPECT_EQ(select(deepseek_v2_lite(), automatic()).backend, "cpu_mla");
  EXPECT_EQ(select(deepseek_v32(), automatic()).backend, "cpu_sparse");
  EXPECT_EQ(select(phi3_small_blocksparse(), automatic()).backend, "cpu_blocksparse");
  LayerConfig fp8 = deepseek_v2_lite();
  fp8.kv_cache_dtype = KVCacheDType::fp8;
  EXPECT_EQ(select(fp8, automatic()).backend, "cpu_mla");
  EXPECT_EQ(select(deepseek_v2_lite(), automatic()).block_size, 64);  // the latent cache's preferred block
}

TEST(MlaSelector, SparseLayerForcedOntoDenseMlaBackend) {
  EXPECT_TRUE(has(reason_fields("cpu_mla", deepseek_v32()), "use_sparse"));
  const std::string msg = forced_error(deepseek_v32(), "cpu_mla");
  EXPECT_NE(msg.find("use_sparse"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cpu_sparse"), std::string::npos) << "the error should name the backend that serves it: " << msg;
}

TEST(MlaSelector, DenseMlaLayerForcedOntoSparseBackend) {
  const auto fields = reason_fields("cpu_sparse", deepseek_v2_lite());
  EXPECT_TRUE(has(fields, "use_sparse"));
  EXPECT_FALSE(has(fields, "use_mla"));
  EXPECT_NE(forced_error(deepseek_v2_lite(), "cpu_sparse").find("use_sparse"), std::string::npos);
}

TEST(MlaSelector, NonMlaLayersAreRefusedByMlaBackends) {
  LayerConfig dense;  // an ordinary GQA layer
  for (const char* b : {"cpu_mla", "cpu_sparse"}) {
    EXPECT_TRUE(has(reason_fields(b, dense), "use_mla")) << b;
    EXPECT_NE(forced_error(dense, b).find("use_mla"), std::string::npos) << b;
  }
  const auto bs = reason_fields("cpu_mla", phi3_small_blocksparse());
  EXPECT_TRUE(has(bs, "use_mla"));
  EXPECT_TRUE(has(bs, "use_block_sparse"));
}

TEST(MlaSelector, BlockSparseBackendServesOnlyBlockSparseLayers) {
  LayerConfig dense;
  EXPECT_TRUE(has(reason_fields("cpu_blocksparse", dense), "use_block_sparse"));
  EXPECT_TRUE(has(reason_fields("cpu_blocksparse", deepseek_v2_lite()), "use_mla"));
  EXPECT_TRUE(has(reason_fields("cpu_blocksparse", deepseek_v2_lite()), "use_block_sparse"));
  EXPECT_NE(forced_error(phi3_small_blocksparse(), "cpu_mla").find("use_block_sparse"), std::string::npos);
}

TEST(MlaSelector, IrregularMlaShapesGiveTheirOwnReasons) {
  LayerConfig bad = deepseek_v2_lite();
  bad.kv_lora_rank = 600;  // larger than the entry
  EXPECT_TRUE(has(reason_fields("cpu_mla", bad), "kv_lora_rank"));
  LayerConfig bad_v = deepseek_v2_lite();
  bad_v.head_size_v = 128;  // the absorbed output is latent-wide
  EXPECT_TRUE(has(reason_fields("cpu_mla", bad_v), "head_size_v"));
  LayerConfig no_topk = deepseek_v32();
  no_topk.index_topk = 0;
  EXPECT_TRUE(has(reason_fields("cpu_sparse", no_topk), "index_topk"));
  LayerConfig no_pattern = phi3_small_blocksparse();
  no_pattern.bs_vert_stride = 0;
  EXPECT_TRUE(has(reason_fields("cpu_blocksparse", no_pattern), "bs_vert_stride"));
  LayerConfig window = deepseek_v2_lite();
  window.sliding_window = 128;
  EXPECT_TRUE(has(reason_fields("cpu_mla", window), "sliding_window"));
  LayerConfig ds_mla_v2 = deepseek_v2_lite();  // fp8_ds_mla's entry is 512 + 64 wide
  ds_mla_v2.kv_cache_dtype = KVCacheDType::fp8_ds_mla;
  ds_mla_v2.kv_lora_rank = 256;
  ds_mla_v2.head_size = 320;
  EXPECT_TRUE(has(reason_fields("cpu_mla", ds_mla_v2), "kv_cache_dtype"));
}

TEST(MlaSelector, Fp8DsMlaCacheGoesToTheMlaBackendsOnly) {
  LayerConfig v32 = deepseek_v32();
  v32.kv_cache_dtype = KVCacheDType::fp8_ds_mla;
  EXPECT_TRUE(reason_fields("cpu_sparse", v32).empty());
  LayerConfig dense = deepseek_v32();
  dense.use_sparse = false;
  dense.index_topk = 0;
  dense.kv_cache_dtype = KVCacheDType::fp8_ds_mla;
  EXPECT_TRUE(reason_fields("cpu_mla", dense).empty());
  // A dense-attention backend rejects it on kv_cache_dtype, as for any cache dtype it lacks.
  LayerConfig plain = deepseek_v32();
  plain.use_mla = plain.use_sparse = false;
  plain.kv_cache_dtype = KVCacheDType::fp8_ds_mla;
  EXPECT_TRUE(has(reason_fields("cpu_flash", plain), "kv_cache_dtype"));
}

}  // namespace
}  // namespace attn
