#pragma once
// Reads fields of one Hugging Face config.json. Every failure names the model, the field and
// what was expected, so "missing field" errors point at the exact key to add.
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "attn/error.hpp"

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
    if (!v.is_number()) fail(field, v.dump(), "a number");
    return v.get<double>();
  }
  double number_or(const std::string& field, double fallback) const { return has(field) ? number(field) : fallback; }

  bool boolean_or(const std::string& field, bool fallback) const {
    if (!has(field)) return fallback;
    const auto& v = cfg_.at(field);
    if (!v.is_boolean()) fail(field, v.dump(), "true or false");
    return v.get<bool>();
  }

  std::string string_or(const std::string& field, const std::string& fallback) const {
    if (!has(field)) return fallback;
    const auto& v = cfg_.at(field);
    if (!v.is_string()) fail(field, v.dump(), "a string");
    return v.get<std::string>();
  }

  std::vector<std::string> strings(const std::string& field) const {
    const auto& v = require(field);
    if (!v.is_array()) fail(field, v.dump(), "a list of strings");
    std::vector<std::string> out;
    for (const auto& e : v) {
      if (!e.is_string()) fail(field, v.dump(), "a list of strings");
      out.push_back(e.get<std::string>());
    }
    return out;
  }

  std::vector<int> integers(const std::string& field) const {
    const auto& v = require(field);
    if (!v.is_array()) fail(field, v.dump(), "a list of integers");
    std::vector<int> out;
    for (const auto& e : v) out.push_back(checked_int(field, e));
    return out;
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
  int checked_int(const std::string& field, const nlohmann::json& v) const {
    if (!v.is_number_integer() && !(v.is_number_float() && v.get<double>() == double(int64_t(v.get<double>())))) {
      fail(field, v.dump(), "an integer");
    }
    int64_t x = v.is_number_integer() ? v.get<int64_t>() : int64_t(v.get<double>());
    if (x < 0 || x > (int64_t(1) << 30)) fail(field, v.dump(), "an integer in 0..2^30");
    return int(x);
  }

  const nlohmann::json& cfg_;
  std::string model_;
  std::string architecture_;
};

}  // namespace attn::models
