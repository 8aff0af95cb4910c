#pragma once
// Reads fields of one Hugging Face config.json. Every failure names the model, the field and
// what was expected, so "missing field" errors point at the exact key to add.
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "attn/error.hpp"
#include "models/config_json.hpp"

namespace attn::models {

class ConfigReader {
 public:
  /// `cfg` is the object holding the text-model fields (a multimodal config's text_config).
  ConfigReader(const nlohmann::json& cfg, std::string model, std::string architecture)
      : cfg_(cfg), model_(std::move(model)), architecture_(std::move(architecture)) {}

  const nlohmann::json& json() const { return cfg_; }
  const std::string& model() const { return model_; }
  const std::string& architecture() const { return architecture_; }

  /// Present and not null.
  bool has(const std::string& field) const { return cfg_.contains(field) && !cfg_.at(field).is_null(); }

  int integer(const std::string& field) const { return checked_int(field, require(field)); }
  std::optional<int> opt_integer(const std::string& field) const {
    if (!has(field)) return std::nullopt;
    return checked_int(field, cfg_.at(field));
  }
  int integer_or(const std::string& field, int fallback) const { return opt_integer(field).value_or(fallback); }

  double number(const std::string& field) const {
    const auto& v = require(field);
    if (!v.is_number()) fail(field, preview(v), "a number");
    return v.get<double>();
  }
  double number_or(const std::string& field, double fallback) const { return has(field) ? number(field) : fallback; }

  /// A double for messages: std::to_string would print 1e300 as 301 digits.
  static std::string shown(double x) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", x);
    return text;
  }

  /// `x` (computed from `field`) as a float; values a float cannot hold are an error here,
  /// because converting them is undefined behaviour.
  /// `x` as a float; refuses values past float's range and non-zero values that would round to 0
  /// or a subnormal: 0 is the "unset" sentinel of scales and soft caps (1e-320 would mean "no cap").
  float to_float(const std::string& field, double x) const {
    if (!(std::fabs(x) <= double(std::numeric_limits<float>::max()))) fail(field, shown(x), "a value a float can hold");
    if (x != 0 && std::fabs(x) < double(std::numeric_limits<float>::min()))
      fail(field, shown(x), "0 or a magnitude >= 1.17549e-38 (a normal float)");
    return float(x);
  }

  bool boolean_or(const std::string& field, bool fallback) const {
    if (!has(field)) return fallback;
    const auto& v = cfg_.at(field);
    if (!v.is_boolean()) fail(field, preview(v), "true or false");
    return v.get<bool>();
  }

  std::string string_or(const std::string& field, const std::string& fallback) const {
    if (!has(field)) return fallback;
    const auto& v = cfg_.at(field);
    if (!v.is_string()) fail(field, preview(v), "a string");
    return v.get<std::string>();
  }

  /// A list of at most `max_size` strings (the caller's bound: usually one per layer).
  std::vector<std::string> strings(const std::string& field, std::size_t max_size) const {
    const auto& v = list(field, max_size, "a list of strings");
    std::vector<std::string> out;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string()) fail(field + "[" + std::to_string(i) + "]", preview(v[i]), "a string");
      out.push_back(v[i].get<std::string>());
    }
    return out;
  }

  /// A list of at most `max_size` integers.
  std::vector<int> integers(const std::string& field, std::size_t max_size) const {
    const auto& v = list(field, max_size, "a list of integers");
    std::vector<int> out;
    for (std::size_t i = 0; i < v.size(); ++i) out.push_back(checked_int(field + "[" + std::to_string(i) + "]", v[i]));
    return out;
  }

  /// num_hidden_layers, in 1..kMaxLayers: it sizes every per-layer list, so it is bounded first.
  int num_layers() const {
    const int n = integer("num_hidden_layers");
    if (n < 1 || n > kMaxLayers) fail("num_hidden_layers", std::to_string(n), "1.." + std::to_string(kMaxLayers));
    return n;
  }

  /// head_dim when the config states it, else hidden_size / num_attention_heads (transformers' rule).
  int head_dim() const {
    if (auto h = opt_integer("head_dim")) return *h;
    int heads = integer("num_attention_heads");
    int hidden = integer("hidden_size");
    if (heads <= 0 || hidden % heads != 0) {
      fail("head_dim", "absent", "head_dim, or hidden_size (" + std::to_string(hidden) +
                                     ") divisible by num_attention_heads (" + std::to_string(heads) + ")");
    }
    return hidden / heads;
  }

  [[noreturn]] void fail(const std::string& field, const std::string& value, const std::string& expected) const {
    throw Error("model '" + model_ + "' (" + architecture_ + "): config field '" + field + "'=" + value +
                " invalid: expected " + expected);
  }

 private:
  const nlohmann::json& require(const std::string& field) const {
    if (!has(field)) {
      throw Error("model '" + model_ + "' (" + architecture_ + "): config field '" + field +
                  "' is missing (required for " + architecture_ + ")");
    }
    return cfg_.at(field);
  }
  const nlohmann::json& list(const std::string& field, std::size_t max_size, const std::string& expected) const {
    const auto& v = require(field);
    if (!v.is_array()) fail(field, preview(v), expected);
    if (v.size() > max_size) fail(field, preview(v), expected + " of at most " + std::to_string(max_size) + " entries");
    return v;
  }
  /// Integers in 0..2^30; 2.0 counts as 2 (json_file::to_integer checks the range first).
  int checked_int(const std::string& field, const nlohmann::json& v) const {
    int64_t x = 0;
    switch (json_file::to_integer(v, 0, int64_t(1) << 30, x)) {
      case json_file::IntegerCheck::ok: return int(x);
      case json_file::IntegerCheck::not_integer: fail(field, preview(v), "an integer");
      case json_file::IntegerCheck::out_of_range: fail(field, preview(v), "an integer in 0..2^30");
    }
    fail(field, preview(v), "an integer");
  }

  const nlohmann::json& cfg_;
  std::string model_;
  std::string architecture_;
};

}  // namespace attn::models
