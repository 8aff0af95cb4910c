// MixerConfig shapes and validation, MixerParams validation.
#include <cmath>
#include <sstream>

#include "attn/checked.hpp"
#include "attn/error.hpp"
#include "attn/limits.hpp"
#include "attn/mamba.hpp"

namespace attn {

int MixerConfig::conv_dim() const {
  switch (type) {
    case MambaType::mamba1:
    case MambaType::short_conv:
    case MambaType::custom: return d_conv > 0 ? d_inner : 0;
    case MambaType::mamba2: return d_inner + 2 * n_groups * d_state;
    case MambaType::gdn_attention: return 2 * num_k_heads * head_k_dim + num_heads * head_v_dim;
    case MambaType::linear_attention: return 0;
  }
  return 0;
}

int MixerConfig::out_dim() const {
  switch (type) {
    case MambaType::linear_attention:
    case MambaType::gdn_attention: return num_heads * head_v_dim;
    default: return d_inner;
  }
}

bool MixerConfig::has_chunked_form() const {
  return type == MambaType::mamba2 || type == MambaType::linear_attention || type == MambaType::gdn_attention;
}

std::vector<int64_t> MixerConfig::conv_state_shape(int32_t slots) const {
  if (conv_dim() == 0) return {slots, 0, 0};
  return {slots, conv_dim(), d_conv - 1};
}

std::vector<int64_t> MixerConfig::ssm_state_shape(int32_t slots) const {
  switch (type) {
    case MambaType::mamba1:
    case MambaType::custom: return {slots, d_inner, d_state};
    case MambaType::mamba2: return {slots, num_heads, head_dim, d_state};
    case MambaType::linear_attention:
    case MambaType::gdn_attention: return {slots, num_heads, head_k_dim, head_v_dim};
    case MambaType::short_conv: return {slots, 0};
  }
  return {slots, 0};
}

namespace {
void positive(int v, const char* field, MambaType t) {
  require(v > 0, field, v, std::string("> 0 for a ") + std::string(to_string(t)) + " mixer");
}
}  // namespace

void MixerConfig::validate() const {
  // The conv kernels keep the window on the stack; real layers use 2..4.
  require(d_conv <= 64, "d_conv", d_conv, "<= 64");
  switch (type) {
    case MambaType::mamba1:
    case MambaType::custom:
      positive(d_inner, "d_inner", type);
      positive(d_state, "d_state", type);
      positive(d_conv, "d_conv", type);
      break;
    case MambaType::mamba2:
      positive(num_heads, "num_heads", type);
      positive(head_dim, "head_dim", type);
      positive(d_state, "d_state", type);
      positive(n_groups, "n_groups", type);
      positive(d_conv, "d_conv", type);
      require(d_inner == num_heads * head_dim, "d_inner", d_inner,
              "num_heads * head_dim = " + std::to_string(num_heads * head_dim));
      require(num_heads % n_groups == 0, "n_groups", n_groups, "a divisor of num_heads=" + std::to_string(num_heads));
      break;
    case MambaType::short_conv:
      positive(d_inner, "d_inner", type);
      positive(d_conv, "d_conv", type);
      break;
    case MambaType::linear_attention:
      positive(num_heads, "num_heads", type);
      positive(head_k_dim, "head_k_dim", type);
      positive(head_v_dim, "head_v_dim", type);
      break;
    case MambaType::gdn_attention:
      positive(num_heads, "num_heads", type);
      positive(num_k_heads, "num_k_heads", type);
      positive(head_k_dim, "head_k_dim", type);
      positive(head_v_dim, "head_v_dim", type);
      positive(d_conv, "d_conv", type);
      require(num_heads % num_k_heads == 0, "num_k_heads", num_k_heads,
              "a divisor of num_heads=" + std::to_string(num_heads));
      break;
  }
}

std::string MixerConfig::to_string() const {
  std::ostringstream os;
  os << "MixerConfig(type=" << attn::to_string(type);
  auto field = [&](const char* name, int v) { if (v) os << ", " << name << "=" << v; };
  field("d_inner", d_inner);
  field("d_state", d_state);
  field("d_conv", d_conv);
  if (type == MambaType::mamba2) field("n_groups", n_groups);
  field("num_heads", num_heads);
  field("head_dim", head_dim);
  field("num_k_heads", num_k_heads);
  field("head_k_dim", head_k_dim);
  field("head_v_dim", head_v_dim);
  os << ")";
  return os.str();
}

MixerConfig MixerConfig::from_dims(MambaType type, const std::map<std::string, double>& dims) {
  MixerConfig c;
  c.type = type;
  auto get = [&](const char* key, bool required, int fallback) {
    auto it = dims.find(key);
    if (it == dims.end()) {
      if (required) {
        std::vector<std::string> have;
        for (const auto& [k, v] : dims) have.push_back(k);
        throw Error(std::string("mixer_dims missing '") + key + "' for a " + std::string(attn::to_string(type)) +
                    " mixer (have: " + join(have) + ")");
      }
      return fallback;
    }
    // In int32 range before the cast: a larger double converted to int is undefined behaviour.
    require(std::isfinite(it->second) && it->second == std::floor(it->second) && std::fabs(it->second) <= 2147483647.0, key,
            it->second, "an integer in [-2^31 + 1, 2^31 - 1]");
    return int(it->second);
  };
  switch (type) {
    case MambaType::mamba1:
    case MambaType::custom:
      c.d_inner = get("d_inner", true, 0);
      c.d_state = get("d_state", true, 0);
      c.d_conv = get("d_conv", true, 0);
      break;
    case MambaType::mamba2:
      c.num_heads = get("num_heads", true, 0);
      c.head_dim = get("head_dim", true, 0);
      c.d_inner = get("d_inner", false,
                      int(checked_product("num_heads * head_dim", {c.num_heads, c.head_dim}, 2147483647, "the default d_inner")));
      c.d_state = get("d_state", true, 0);
      c.n_groups = get("n_groups", false, 1);
      c.d_conv = get("d_conv", true, 0);
      break;
    case MambaType::short_conv:
      c.d_inner = get("d_inner", true, 0);
      c.d_conv = get("d_conv", true, 0);
      break;
    case MambaType::linear_attention:
      c.num_heads = get("num_heads", true, 0);
      c.head_k_dim = get("head_k_dim", true, 0);
      c.head_v_dim = get("head_v_dim", false, c.head_k_dim);
      break;
    case MambaType::gdn_attention:
      c.num_heads = get("num_heads", true, 0);
      c.num_k_heads = get("num_k_heads", false, c.num_heads);
      c.head_k_dim = get("head_k_dim", true, 0);
      c.head_v_dim = get("head_v_dim", false, c.head_k_dim);
      c.d_conv = get("d_conv", true, 0);
      break;
  }
  c.validate();
  return c;
}

float MixerParams::effective_scale() const {
  if (scale != 0.0f) return scale;
  if (config.type == MambaType::gdn_attention) return 1.0f / std::sqrt(float(config.head_k_dim));
  return 1.0f;
}

namespace {
void check_len(const std::vector<float>& v, const char* name, int64_t expected, bool optional) {
  if (optional && v.empty()) return;
  require(int64_t(v.size()) == expected, std::string(name) + ".size()", v.size(),
          std::to_string(expected) + (optional ? " (or empty)" : ""));
}
void check_nonpositive(const std::vector<float>& v) {
  for (std::size_t i = 0; i < v.size(); ++i)
    require(std::isfinite(v[i]) && v[i] <= 0.0f, "A[" + std::to_string(i) + "]", v[i], "a finite log-decay rate <= 0");
}
}  // namespace

void MixerParams::validate() const {
  config.validate();
  const MixerConfig& c = config;
  const int64_t cd = c.conv_dim();
  if (cd > 0) {
    check_len(conv_weight, "conv_weight", cd * c.d_conv, false);
    check_len(conv_bias, "conv_bias", cd, true);
  }
  switch (c.type) {
    case MambaType::mamba1:
      check_len(A, "A", int64_t(c.d_inner) * c.d_state, false);
      check_len(D, "D", c.d_inner, true);
      check_len(dt_bias, "dt_bias", c.d_inner, true);
      break;
    case MambaType::mamba2:
      check_len(A, "A", c.num_heads, false);
      check_len(D, "D", c.num_heads, true);
      check_len(dt_bias, "dt_bias", c.num_heads, true);
      break;
    case MambaType::linear_attention: check_len(A, "A", c.num_heads, false); break;
    case MambaType::gdn_attention:
      check_len(A, "A", c.num_heads, false);
      check_len(dt_bias, "dt_bias", c.num_heads, true);
      break;
    case MambaType::short_conv:
    case MambaType::custom: break;
  }
  check_nonpositive(A);
  require(chunk_size >= 0, "chunk_size", chunk_size, ">= 0 (0 = sequential recurrence)");
  check_threads("num_threads", num_threads);
  require(std::isfinite(scale) && scale >= 0.0f, "scale", scale, "a finite value >= 0 (0 = default)");
}

}  // namespace attn
