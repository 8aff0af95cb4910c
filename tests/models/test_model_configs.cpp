// Model configs: every shipped config.json parses into the layers the architecture implies, and
// bad configs fail with errors that name the model and the field.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attn/attn.hpp"
#include "support/expect_error.hpp"

namespace {

using attn::LayerKind;
using attn::ModelSpec;

std::vector<int> attention_indices(const ModelSpec& m) {
  std::vector<int> out;
  for (const auto& l : m.layers) if (l.kind == LayerKind::attention) out.push_back(l.index);
  return out;
}

std::string builtin_text(const std::string& name) {
  std::ifstream in(std::string(ATTN_SOURCE_DIR) + "/models/" + name + ".json");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

using attn::test::error_message;

TEST(ModelConfigs, EveryShippedModelParsesWithConsistentLayers) {
  auto names = attn::builtin_models();
  ASSERT_GE(names.size(), 15u);
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    ModelSpec m = attn::load_model(name);
    auto cfg = nlohmann::json::parse(m.config_json);
    const auto& text = cfg.contains("text_config") ? cfg["text_config"] : cfg;
    EXPECT_EQ(m.num_layers, text["num_hidden_layers"].get<int>());
    ASSERT_EQ(int(m.layers.size()), m.num_layers);
    for (int i = 0; i < m.num_layers; ++i) EXPECT_EQ(m.layers[size_t(i)].index, i);
    // Honesty: every shipped config says where its values come from and which are unverified.
    ASSERT_TRUE(cfg.contains("_attn_provenance"));
    EXPECT_FALSE(cfg["_attn_provenance"]["source"].get<std::string>().empty());
    EXPECT_TRUE(cfg["_attn_provenance"]["unverified_fields"].is_array());
  }
  EXPECT_NE(std::find(names.begin(), names.end(), attn::default_model()), names.end());
}

TEST(ModelConfigs, Llama31IsUniformGqa) {
  ModelSpec m = attn::load_model("llama-3.1-8b");
  EXPECT_EQ(m.architecture, "LlamaForCausalLM");
  EXPECT_EQ(m.hidden_size, 4096);
  ASSERT_EQ(attention_indices(m).size(), 32u);
  for (const auto& l : m.layers) {
    EXPECT_EQ(l.attention.num_heads, 32);
    EXPECT_EQ(l.attention.num_kv_heads, 8);
    EXPECT_EQ(l.attention.head_size, 128);  // derived 4096 / 32: the config has no head_dim
    EXPECT_EQ(l.attention.dtype, attn::DType::bfloat16);
    EXPECT_EQ(l.attention.sliding_window, 0);
    EXPECT_TRUE(l.attention.causal());
  }
}

TEST(ModelConfigs, MistralWindowsEveryLayer) {
  ModelSpec m = attn::load_model("mistral-7b");
  for (const auto& l : m.layers) EXPECT_EQ(l.attention.sliding_window, 4096);
}

TEST(ModelConfigs, QwenWindowOnlyWithUseSlidingWindowFromMaxWindowLayers) {
  ModelSpec m = attn::load_model("qwen2.5-7b");
  EXPECT_EQ(m.num_layers, 28);
  for (const auto& l : m.layers) {
    EXPECT_EQ(l.attention.sliding_window, 0);  // use_sliding_window is false
    EXPECT_EQ(l.attention.num_heads, 28);
    EXPECT_EQ(l.attention.num_kv_heads, 4);
    EXPECT_EQ(l.attention.head_size, 128);
  }
  auto cfg = nlohmann::json::parse(builtin_text("qwen2.5-7b"));
  cfg["use_sliding_window"] = true;
  cfg["sliding_window"] = 4096;
  cfg["max_window_layers"] = 20;
  ModelSpec w = attn::parse_model_config(cfg.dump(), "qwen-windowed");
  EXPECT_EQ(w.layers[19].attention.sliding_window, 0);
  EXPECT_EQ(w.layers[20].attention.sliding_window, 4096);
  EXPECT_EQ(w.layers[27].attention.sliding_window, 4096);

  ModelSpec q3 = attn::load_model("qwen3-30b-a3b");
  EXPECT_EQ(q3.layers[0].attention.head_size, 128);  // explicit head_dim, not 2048 / 32
  EXPECT_EQ(q3.layers[0].attention.num_kv_heads, 4);
}

TEST(ModelConfigs, Gemma2AlternatesLocalAndGlobalWithSoftCap) {
  ModelSpec m = attn::load_model("gemma-2-9b");
  ASSERT_EQ(m.num_layers, 42);
  for (const auto& l : m.layers) {
    EXPECT_EQ(l.attention.sliding_window, l.index % 2 == 0 ? 4096 : 0) << l.index;
    EXPECT_FLOAT_EQ(l.attention.logits_soft_cap, 50.0f);
    EXPECT_EQ(l.attention.head_size, 256);
    EXPECT_FLOAT_EQ(l.softmax_scale, 1.0f / 16.0f);  // query_pre_attn_scalar 256
    EXPECT_EQ(l.attention.dtype, attn::DType::bfloat16);  // torch_dtype float32 runs in bf16 ("auto")
  }
}

TEST(ModelConfigs, Gemma3ReadsTextConfigAndEverySixthLayerIsGlobal) {
  ModelSpec m = attn::load_model("gemma-3-12b");
  EXPECT_EQ(m.hidden_size, 3840);
  ASSERT_EQ(m.num_layers, 48);
  for (const auto& l : m.layers) {
    EXPECT_EQ(l.attention.sliding_window, (l.index + 1) % 6 == 0 ? 0 : 1024) << l.index;
    EXPECT_EQ(l.attention.logits_soft_cap, 0.0f);
    EXPECT_EQ(l.attention.num_heads, 16);
    EXPECT_EQ(l.attention.num_kv_heads, 8);
  }
}

TEST(ModelConfigs, GptOssHasSinksAndAlternatingWindow128) {
  ModelSpec m = attn::load_model("gpt-oss-20b");
  ASSERT_EQ(m.num_layers, 24);
  for (const auto& l : m.layers) {
    EXPECT_TRUE(l.attention.has_sink);
    EXPECT_EQ(l.attention.head_size, 64);
    EXPECT_EQ(l.attention.num_heads, 64);
    EXPECT_EQ(l.attention.num_kv_heads, 8);
    EXPECT_EQ(l.attention.sliding_window, l.index % 2 == 0 ? 128 : 0);
  }
}

TEST(ModelConfigs, DeepSeekLayersAreMlaShaped) {
  for (std::string name : {"deepseek-v2-lite", "deepseek-v3", "deepseek-v3.2"}) {
    SCOPED_TRACE(name);
    ModelSpec m = attn::load_model(name);
    const auto& c = m.layers[0].attention;
    EXPECT_TRUE(c.use_mla);
    EXPECT_EQ(c.num_kv_heads, 1);
    EXPECT_EQ(c.head_size, 576);
    EXPECT_EQ(c.head_size_v, 512);
    EXPECT_EQ(c.kv_lora_rank, 512);
    EXPECT_EQ(c.qk_rope_head_dim, 64);
    EXPECT_EQ(c.qk_nope_head_dim, 128);
    EXPECT_EQ(c.v_head_dim, 128);
    EXPECT_NEAR(m.layers[0].softmax_scale, 1.0 / std::sqrt(192.0), 1e-7);
    EXPECT_EQ(c.use_sparse, name == "deepseek-v3.2");
    EXPECT_EQ(c.index_topk, name == "deepseek-v3.2" ? 2048 : 0);
  }
  EXPECT_EQ(attn::load_model("deepseek-v2-lite").num_layers, 27);
  EXPECT_EQ(attn::load_model("deepseek-v3").layers[0].attention.num_heads, 128);
}

TEST(ModelConfigs, Phi3SmallIsBlockSparseWithPeriodicDenseLayers) {
  ModelSpec m = attn::load_model("phi-3-small");
  ASSERT_EQ(m.num_layers, 32);
  for (const auto& l : m.layers) {
    const bool dense = (l.index + 1) % 2 == 0;
    EXPECT_EQ(l.attention.use_block_sparse, !dense) << l.index;
    if (!dense) {
      EXPECT_EQ(l.attention.bs_block_size, 64);
      EXPECT_EQ(l.attention.bs_local_blocks, 16);
      EXPECT_EQ(l.attention.bs_vert_stride, 8);
      // blocksparse_homo_head_pattern = false: vLLM's step max(1, 8 / 32 heads) = 1.
      EXPECT_EQ(l.attention.bs_head_sliding_step, 1);
    }
    EXPECT_FLOAT_EQ(l.softmax_scale, 1.0f / 128.0f);  // muP: mup_attn_multiplier / head_dim
  }
  ModelSpec mini = attn::load_model("phi-3-mini");
  EXPECT_EQ(mini.layers[0].attention.head_size, 96);
  EXPECT_EQ(mini.layers[0].attention.num_kv_heads, 32);
}

TEST(ModelConfigs, BertIsEncoderOnly) {
  ModelSpec m = attn::load_model("bert-base-uncased");
  ASSERT_EQ(m.num_layers, 12);
  for (const auto& l : m.layers) {
    EXPECT_EQ(l.attention.attn_type, attn::AttnType::encoder_only);
    EXPECT_FALSE(l.attention.causal());
    EXPECT_EQ(l.attention.head_size, 64);
    EXPECT_EQ(l.attention.num_kv_heads, 12);
  }
}

TEST(ModelConfigs, MambaIsAttentionFree) {
  ModelSpec m = attn::load_model("mamba-130m");
  ASSERT_EQ(m.num_layers, 24);
  EXPECT_TRUE(attention_indices(m).empty());
  for (const auto& l : m.layers) {
    EXPECT_EQ(l.mixer, attn::MambaType::mamba1);
    EXPECT_TRUE(l.attention.is_attention_free);
    EXPECT_EQ(l.mixer_dims.at("d_inner"), 1536);
    EXPECT_EQ(l.mixer_dims.at("d_state"), 16);
    EXPECT_EQ(l.mixer_dims.at("d_conv"), 4);
  }
}

TEST(ModelConfigs, HybridsPlaceAttentionWhereTheConfigSays) {
  ModelSpec jamba = attn::load_model("jamba-1.5-mini");
  EXPECT_EQ(attention_indices(jamba), (std::vector<int>{4, 12, 20, 28}));
  EXPECT_EQ(jamba.layers[0].mixer, attn::MambaType::mamba1);
  EXPECT_EQ(jamba.layers[0].mixer_dims.at("d_inner"), 8192);
  EXPECT_EQ(jamba.layers[4].attention.num_kv_heads, 8);

  ModelSpec next = attn::load_model("qwen3-next-80b-a3b");
  std::vector<int> full;
  for (int i = 3; i < 48; i += 4) full.push_back(i);
  EXPECT_EQ(attention_indices(next), full);
  EXPECT_EQ(next.layers[0].mixer, attn::MambaType::gdn_attention);
  EXPECT_EQ(next.layers[0].mixer_dims.at("num_heads"), 32);
  EXPECT_EQ(next.layers[0].mixer_dims.at("num_k_heads"), 16);
  EXPECT_EQ(next.layers[0].mixer_dims.at("head_k_dim"), 128);
  EXPECT_EQ(next.layers[3].attention.head_size, 256);

  ModelSpec lfm = attn::load_model("lfm2-1.2b");
  EXPECT_EQ(attention_indices(lfm), (std::vector<int>{2, 5, 8, 10, 12, 14}));
  EXPECT_EQ(lfm.layers[0].mixer, attn::MambaType::short_conv);
  EXPECT_EQ(lfm.layers[0].mixer_dims.at("d_conv"), 3);
  EXPECT_EQ(lfm.layers[2].attention.head_size, 64);
}

TEST(ModelConfigs, LayerTypesListOverridesTheArchitectureRule) {
  auto cfg = nlohmann::json::parse(builtin_text("lfm2-1.2b"));
  cfg.erase("full_attn_idxs");
  cfg["layer_types"] = std::vector<std::string>(16, "conv");
  cfg["layer_types"][7] = "full_attention";
  EXPECT_EQ(attention_indices(attn::parse_model_config(cfg.dump(), "lfm2-types")), std::vector<int>{7});

  cfg["layer_types"] = std::vector<std::string>(3, "conv");
  std::string err = error_message([&] { attn::parse_model_config(cfg.dump(), "lfm2-short"); });
  EXPECT_NE(err.find("layer_types"), std::string::npos) << err;
  EXPECT_NE(err.find("num_hidden_layers=16"), std::string::npos) << err;

  cfg["layer_types"] = std::vector<std::string>(16, "conv");
  cfg["layer_types"][1] = "mamba";
  err = error_message([&] { attn::parse_model_config(cfg.dump(), "lfm2-bad-type"); });
  EXPECT_NE(err.find("layer_types[1]"), std::string::npos) << err;
  EXPECT_NE(err.find("'mamba'"), std::string::npos) << err;
}

TEST(ModelConfigs, OverridesApplyToEveryAttentionLayer) {
  attn::ModelOverrides o;
  o.dtype = attn::DType::float16;
  o.kv_cache_dtype = attn::KVCacheDType::fp8;
  o.block_size = 32;
  ModelSpec m = attn::load_model("gemma-2-9b", o);
  for (const auto& l : m.layers) {
    EXPECT_EQ(l.attention.dtype, attn::DType::float16);
    EXPECT_EQ(l.attention.kv_cache_dtype, attn::KVCacheDType::fp8);
    EXPECT_EQ(l.attention.block_size, 32);
  }
}

TEST(ModelConfigs, MissingFieldNamesModelAndField) {
  auto cfg = nlohmann::json::parse(builtin_text("llama-3.1-8b"));
  cfg.erase("num_attention_heads");
  std::string err = error_message([&] { attn::parse_model_config(cfg.dump(), "my-llama"); });
  EXPECT_NE(err.find("my-llama"), std::string::npos) << err;
  EXPECT_NE(err.find("'num_attention_heads' is missing"), std::string::npos) << err;
  EXPECT_NE(err.find("LlamaForCausalLM"), std::string::npos) << err;

  auto ds = nlohmann::json::parse(builtin_text("deepseek-v3"));
  ds.erase("kv_lora_rank");
  err = error_message([&] { attn::parse_model_config(ds.dump(), "ds"); });
  EXPECT_NE(err.find("'kv_lora_rank' is missing"), std::string::npos) << err;

  auto jamba = nlohmann::json::parse(builtin_text("jamba-1.5-mini"));
  jamba.erase("attn_layer_period");
  err = error_message([&] { attn::parse_model_config(jamba.dump(), "jamba"); });
  EXPECT_NE(err.find("'attn_layer_period' is missing"), std::string::npos) << err;
}

TEST(ModelConfigs, BadValuesNameFieldValueAndExpectation) {
  auto cfg = nlohmann::json::parse(builtin_text("llama-3.1-8b"));
  cfg["num_key_value_heads"] = 5;
  std::string err = error_message([&] { attn::parse_model_config(cfg.dump(), "m"); });
  EXPECT_NE(err.find("'num_key_value_heads'=5"), std::string::npos) << err;
  EXPECT_NE(err.find("divisor"), std::string::npos) << err;

  cfg = nlohmann::json::parse(builtin_text("llama-3.1-8b"));
  cfg["torch_dtype"] = "float64";
  err = error_message([&] { attn::parse_model_config(cfg.dump(), "m"); });
  EXPECT_NE(err.find("torch_dtype"), std::string::npos) << err;

  cfg = nlohmann::json::parse(builtin_text("llama-3.1-8b"));
  cfg["num_hidden_layers"] = "32";
  err = error_message([&] { attn::parse_model_config(cfg.dump(), "m"); });
  EXPECT_NE(err.find("'num_hidden_layers'=\"32\""), std::string::npos) << err;
  EXPECT_NE(err.find("an integer"), std::string::npos) << err;
}

TEST(ModelConfigs, UnknownArchitectureListsKnownOnes) {
  std::string err = error_message([] {
    attn::parse_model_config(R"({"architectures": ["FancyNetForCausalLM"], "model_type": "fancy", "hidden_size": 8})", "fancy");
  });
  EXPECT_NE(err.find("unknown architecture 'FancyNetForCausalLM'"), std::string::npos) << err;
  EXPECT_NE(err.find("LlamaForCausalLM"), std::string::npos) << err;

  err = error_message([] { attn::parse_model_config(R"({"hidden_size": 8})", "anon"); });
  EXPECT_NE(err.find("'architectures' is missing"), std::string::npos) << err;

  err = error_message([] { attn::parse_model_config("{not json", "broken"); });
  EXPECT_NE(err.find("not valid JSON"), std::string::npos) << err;
}

TEST(ModelConfigs, ModelTypeAloneSelectsTheFamily) {
  auto cfg = nlohmann::json::parse(builtin_text("mistral-7b"));
  cfg.erase("architectures");
  ModelSpec m = attn::parse_model_config(cfg.dump(), "mistral-no-arch");
  EXPECT_EQ(m.architecture, "mistral");
  EXPECT_EQ(m.layers[0].attention.sliding_window, 4096);
}

TEST(ModelConfigs, UnknownBuiltinNameListsTheShippedOnes) {
  std::string err = error_message([] { attn::load_model("no-such-model"); });
  EXPECT_NE(err.find("no-such-model"), std::string::npos) << err;
  EXPECT_NE(err.find("llama-3.1-8b"), std::string::npos) << err;
}

}  // namespace
