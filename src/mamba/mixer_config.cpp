// MixerConfig shapes and validation, MixerParams validation: the per-type table's rows (mixer_types.cpp) read generically.
#include <cmath>
#include <sstream>

#include "attn/checked.hpp"
#include "attn/error.hpp"
#include "attn/limits.hpp"
#include "attn/mamba.hpp"

namespace attn {

int MixerConfig::conv_dim() const { return mixer_type_info(type).conv_dim(*this); }

int MixerConfig::out_dim() const { return int(mixer_type_info(type).out(*this).numel()); }

std::vector<int64_t> MixerConfig::out_shape(int64_t tokens) const { return mixer_type_info(type).out(*this).after(tokens); }

bool MixerConfig::has_chunked_form() const { return mixer_type_info(type).chunked; }

std::vector<int64_t> MixerConfig::conv_state_shape(int32_t slots) const {
  if (conv_dim() == 0) return {slots, 0, 0};
  return {slots, conv_dim(), d_conv - 1};
}

std::vector<int64_t> MixerConfig::ssm_state_shape(int32_t slots) const {
  return mixer_type_info(type).ssm_state(*this).after(slots);
}

void MixerConfig::validate() const {
  // The conv kernels keep the window on the stack; real layers use 2..4.
  require(d_conv <= 64, "d_conv", d_conv, "<= 64");
  const MixerTypeInfo& row = mixer_type_info(type);
  for (const MixerTypeInfo::Dim& d : row.dims)
    if (d.positive)
      require(this->*d.field > 0, d.key, this->*d.field, std::string("> 0 for a ") + std::string(attn::to_string(type)) + " mixer");
  if (row.check) row.check(*this);
}

std::string MixerConfig::to_string() const {
  std::ostringstream os;
  os << "MixerConfig(type=" << attn::to_string(type);
  auto field = [&](const char* name, int v) { if (v) os << ", " << name << "=" << v; };
  field("d_inner", d_inner);
  field("d_state", d_state);
  field("d_conv", d_conv);
  for (const MixerTypeInfo::Dim& d : mixer_type_info(type).dims)
    if (d.field == &MixerConfig::n_groups) field("n_groups", n_groups);  // default 1: only where the type reads it
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
  for (const MixerTypeInfo::Dim& d : mixer_type_info(type).dims) {
    // The default is computed first, from the fields read so far (mamba2's d_inner checks its product).
    const int fallback = d.fallback ? d.fallback(c) : 0;
    c.*d.field = get(d.key, !d.fallback, fallback);
  }
  c.validate();
  return c;
}

float MixerParams::effective_scale() const {
  if (scale != 0.0f) return scale;
  const auto default_scale = mixer_type_info(config.type).default_scale;
  return default_scale ? default_scale(config) : 1.0f;
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
  for (const MixerTypeInfo::Weight& w : mixer_type_info(c.type).weights) check_len(this->*w.field, w.name, w.size(c), w.optional);
  check_nonpositive(A);
  require(chunk_size >= 0, "chunk_size", chunk_size, ">= 0 (0 = sequential recurrence)");
  check_threads("num_threads", num_threads);
  require(std::isfinite(scale) && scale >= 0.0f, "scale", scale, "a finite value >= 0 (0 = default)");
}

}  // namespace attn
