// Untrusted config.json files: each reproduced failure (stack overflow on deep nesting, raw
// nlohmann exceptions, wrong-typed fields ignored, a tiny config asking for gigabytes, files read
// whole) is now an attn::Error naming the model, the field, the value and what was expected.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attn/attn.hpp"
#include "models/config_json.hpp"
#include "support/expect_error.hpp"

namespace {

using attn::test::error_message;
using attn::test::throws_error;
using nlohmann::json;

json llama() {
  std::ifstream in(std::string(ATTN_SOURCE_DIR) + "/models/llama-3.1-8b.json");
  return json::parse(in);
}

/// The llama config's text with `value` spliced in raw as field `field` (for values json
/// cannot represent, such as 1e400, or nesting it would overflow the stack printing).
std::string with_raw_field(const std::string& field, const std::string& value) {
  std::string text = llama().dump();
  return text.substr(0, text.size() - 1) + ",\"" + field + "\":" + value + "}";
}

TEST(ConfigBounds, DeepNestingIsAnErrorNotAStackOverflow) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_TRUE(throws_error([&] { attn::parse_model_config(with_raw_field("rope_scaling", deep), "deep"); },
                           {"model 'deep'", "'rope_scaling'", "nests deeper than 64 levels"}));
  const std::string objects = [] {
    std::string s;
    for (int i = 0; i < 100000; ++i) s += "{\"a\":";
    return s + "1" + std::string(100000, '}');
  }();
  EXPECT_TRUE(throws_error([&] { attn::parse_model_config(with_raw_field("quantization_config", objects), "deep"); },
                           {"'quantization_config.a.a.a", "nests deeper than 64 levels"}));
}

TEST(ConfigBounds, NestedValueInAnIntegerFieldIsPreviewedNotDumped) {
  // 60 levels pass the nesting cap; the message describes the value instead of printing it.
  const std::string nested = std::string(60, '[') + std::string(60, ']');
  auto text = llama().dump();
  text.replace(text.find("\"num_attention_heads\":32"), 24, "\"num_attention_heads\":" + nested);
  const std::string err = error_message([&] { attn::parse_model_config(text, "m"); });
  EXPECT_NE(err.find("'num_attention_heads'=a list of 1 entries invalid: expected an integer"), std::string::npos) << err;
}

TEST(ConfigBounds, NumberOutOfRangeNamesTheField) {
  // 1e400 is valid JSON that no double holds: named as out of range, not as nlohmann's exception text.
  const std::string big = error_message([] { attn::parse_model_config(with_raw_field("rope_theta", "1e400"), "big"); });
  EXPECT_NE(big.find("model 'big': config field 'rope_theta'=1e400 invalid: out of range"), std::string::npos) << big;
  EXPECT_EQ(big.find("json.exception"), std::string::npos) << big;
  EXPECT_TRUE(throws_error([] { attn::parse_model_config(with_raw_field("rope_scaling", R"({"type":"yarn","factor":-1e400})"), "big"); },
                           {"model 'big': config field 'rope_scaling.factor'=-1e400 invalid: out of range"}));
  // After a nested object closes, a failure is placed in the outer field, not the inner one.
  EXPECT_TRUE(throws_error([] { attn::parse_model_config(R"({"rope_scaling":{"factor":2},"x":[1,2e999]})", "big"); },
                           {"field 'x'=2e999"}));
  EXPECT_TRUE(throws_error([] { attn::parse_model_config(R"({"rope_scaling":{"factor":2}, 1})", "bad"); },
                           {"model 'bad': config is not valid JSON (in field 'rope_scaling'): parse error at line 1", "syntax error"}));
  auto cfg = llama();
  cfg["hidden_size"] = 1e300;  // valid JSON, far out of an int's range: an error, not an undefined cast
  EXPECT_TRUE(throws_error([&] { attn::parse_model_config(cfg.dump(), "m"); }, {"'hidden_size'=1e+300", "an integer in 0..2^30"}));
  cfg = llama();
  cfg["hidden_size"] = 18446744073709551615ull;
  EXPECT_TRUE(throws_error([&] { attn::parse_model_config(cfg.dump(), "m"); }, {"'hidden_size'=18446744073709551615", "0..2^30"}));
}

TEST(ConfigBounds, WrongTypedKnownFieldsAreRejected) {
  auto cfg = llama();
  cfg["model_type"] = 5;
  EXPECT_TRUE(throws_error([&] { attn::parse_model_config(cfg.dump(), "m"); }, {"model 'm'", "'model_type'=5", "a string"}));

  cfg = llama();
  cfg["architectures"] = "LlamaForCausalLM";
  EXPECT_TRUE(throws_error([&] { attn::parse_model_config(cfg.dump(), "m"); },
                           {"'architectures'=\"LlamaForCausalLM\"", "a list of strings"}));
  cfg["architectures"] = json::array({7});
  EXPECT_TRUE(throws_error([&] { attn::parse_model_config(cfg.dump(), "m"); }, {"'architectures[0]'=7", "a string"}));
  cfg["architectures"] = json::array();
  EXPECT_TRUE(throws_error([&] { attn::parse_model_config(cfg.dump(), "m"); }, {"'architectures'", "a non-empty list"}));

  cfg = llama();
  cfg["text_config"] = "see the outer config";
  EXPECT_TRUE(throws_error([&] { attn::parse_model_config(cfg.dump(), "m"); },
                           {"(LlamaForCausalLM)", "'text_config'=\"see the outer config\"", "an object"}));
  cfg["text_config"] = json::array({1, 2});
  EXPECT_TRUE(throws_error([&] { attn::parse_model_config(cfg.dump(), "m"); }, {"'text_config'=a list of 2 entries"}));
}

TEST(ConfigBounds, TinyConfigCannotRequestHugeAllocations) {
  // 167 bytes asking for 2^30 layers: refused before any per-layer list is built.
  const std::string tiny =
      R"({"architectures":["Gemma2ForCausalLM"],"hidden_size":8,"num_attention_heads":1,"num_hidden_layers":1073741824,"sliding_window":4})";
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(throws_error([&] { attn::parse_model_config(tiny, "tiny"); },
                           {"'num_hidden_layers'=1073741824", "1.." + std::to_string(attn::models::kMaxLayers)}));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));

  auto cfg = llama();
  cfg["num_hidden_layers"] = 2;
  cfg["layer_types"] = json::array();
  for (int i = 0; i < 100000; ++i) cfg["layer_types"].push_back("full_attention");
  EXPECT_TRUE(throws_error([&] { attn::parse_model_config(cfg.dump(), "m"); }, {"'layer_types'=a list of 100000 entries", "at most 4096"}));
  cfg["layer_types"] = json::array({"full_attention", "full_attention", "full_attention"});
  EXPECT_TRUE(throws_error([&] { attn::parse_model_config(cfg.dump(), "m"); }, {"'layer_types'=3 entries", "num_hidden_layers=2"}));
}

TEST(ConfigBounds, SumsAndProductsOfLargeFieldsAreErrors) {
  std::ifstream in(std::string(ATTN_SOURCE_DIR) + "/models/deepseek-v3.json");
  json ds = json::parse(in);
  ds["kv_lora_rank"] = 1 << 30;
  ds["qk_rope_head_dim"] = 1 << 30;
  EXPECT_TRUE(throws_error([&] { attn::parse_model_config(ds.dump(), "ds"); }, {"'kv_lora_rank'", "kv_lora_rank + qk_rope_head_dim <= 2^30"}));

  std::ifstream min(std::string(ATTN_SOURCE_DIR) + "/models/mamba-130m.json");
  json mamba = json::parse(min);
  mamba.erase("intermediate_size");
  mamba["expand"] = 1 << 30;
  EXPECT_TRUE(throws_error([&] { attn::parse_model_config(mamba.dump(), "mamba"); }, {"'expand'", "expand * hidden_size"}));

  std::ifstream gin(std::string(ATTN_SOURCE_DIR) + "/models/gemma-2-9b.json");
  json gemma = json::parse(gin);
  gemma["attn_logit_softcapping"] = 1e300;
  EXPECT_TRUE(throws_error([&] { attn::parse_model_config(gemma.dump(), "g"); }, {"'attn_logit_softcapping'=1e+300", "a value a float can hold"}));
}

TEST(ConfigBounds, OversizeFilesAreRefusedBeforeReading) {
  const std::string text(attn::models::kMaxConfigBytes + 1, ' ');
  EXPECT_TRUE(throws_error([&] { attn::parse_model_config(text, "huge"); }, {"model 'huge'", "16777217 bytes", "at most 16777216 bytes"}));

  namespace fs = std::filesystem;
  const fs::path p = fs::temp_directory_path() / ("attn_huge_config_" + std::to_string(::getpid()) + ".json");
  {
    std::ofstream out(p, std::ios::binary);
    out << text;
  }
  EXPECT_TRUE(throws_error([&] { attn::load_model(p.string()); }, {p.string(), "16777217 bytes", "at most 16777216 bytes"}));
  fs::remove(p);
}

TEST(ConfigBounds, NonRegularFilesAreRefused) {
  // load_model() takes only regular files as paths; the reader refuses the rest on its own as well.
  for (const char* path : {"/dev/zero", "/dev/urandom"}) {
    SCOPED_TRACE(path);
    EXPECT_TRUE(throws_error([&] { attn::load_model(path); }, {"model='", "expected a config.json path"}));
  }
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("attn_config_dir_" + std::to_string(::getpid()));
  fs::create_directories(dir / "config.json");
  EXPECT_TRUE(throws_error([&] { attn::load_model(dir.string()); }, {"expected a config.json path"}));
  fs::remove_all(dir);
}

TEST(ConfigBounds, LongStringValuesAreClippedInMessages) {
  const std::string long_name(100000, 'x');
  for (const char* field : {"torch_dtype", "model_type", "layer_types"}) {
    SCOPED_TRACE(field);
    auto cfg = llama();
    if (std::string(field) == "layer_types") cfg[field] = json::array({long_name});
    else cfg[field] = long_name;
    if (std::string(field) == "layer_types") cfg["num_hidden_layers"] = 1;
    if (std::string(field) == "model_type") cfg.erase("architectures");
    const std::string err = error_message([&] { attn::parse_model_config(cfg.dump(), "m"); });
    EXPECT_NE(err.find(field), std::string::npos) << err.substr(0, 300);
    EXPECT_LT(err.size(), 2000u);
  }
}

TEST(ConfigBounds, PreviewNeverPrintsMoreThanAShortLine) {
  EXPECT_EQ(attn::models::preview(json::array({1, 2, 3})), "a list of 3 entries");
  EXPECT_EQ(attn::models::preview(json::object({{"a", 1}})), "an object of 1 fields");
  EXPECT_EQ(attn::models::preview(json(5)), "5");
  EXPECT_LT(attn::models::preview(json(std::string(100000, 'x'))).size(), 80u);
}

}  // namespace

namespace {

json gemma2() {
  std::ifstream in(std::string(ATTN_SOURCE_DIR) + "/models/gemma-2-9b.json");
  return json::parse(in);
}

TEST(ConfigBounds, GemmaScaleAndSoftCapDoNotUnderflowToTheirUnsetSentinels) {
  // 1e300 gave a scale of 1e-150, 0 as a float: "the default scale"; a soft cap of 1e-320 gave
  // 0: "no cap". Both are refused, naming the field.
  auto cfg = gemma2();
  cfg["query_pre_attn_scalar"] = 1e300;
  EXPECT_TRUE(throws_error([&] { attn::parse_model_config(cfg.dump(), "g"); },
                           {"model 'g'", "query_pre_attn_scalar", "1e+300", "normal float"}));
  cfg = gemma2();
  cfg["attn_logit_softcapping"] = 1e-320;
  EXPECT_TRUE(throws_error([&] { attn::parse_model_config(cfg.dump(), "g"); },
                           {"model 'g'", "attn_logit_softcapping", "normal float"}));
  cfg = gemma2();
  cfg["attn_logit_softcapping"] = 0.0;  // 0 stays "no cap"
  EXPECT_NO_THROW(attn::parse_model_config(cfg.dump(), "g"));
}

}  // namespace
