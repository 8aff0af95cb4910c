#pragma once
// Selector-test helpers. Synthetic backends: select() reads Registry::instance(), so they are added
// there, each under a unique name "synth_<tag>_<n>". They serve only head sizes of 1000 and more
// (which no real layer in another test uses), so they never change another test's decision;
// the conformance suite skips every "synth_" name. They have no factory: selection only.
#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>

#include "attn/registry.hpp"

namespace attn::test {

/// Head sizes reserved for synthetic backends (one per test keeps tests independent).
constexpr int kSyntheticHeadBase = 1000;

/// A permissive CPU capability set serving exactly `head_size`, float32/16/bf16, any block size.
inline Capabilities synthetic_caps(int head_size) {
  Capabilities c;
  c.platforms = {PlatformKind::cpu};
  c.dtypes = {DType::float32, DType::float16, DType::bfloat16};
  c.head_sizes = SizeRule::one_of({head_size});
  c.block_sizes = SizeRule::any();
  return c;
}

/// Registers a synthetic backend; returns its unique name.
inline std::string add_synthetic(const std::string& tag, Capabilities caps, int priority, std::string module = {},
                                 std::function<std::vector<Reason>(const LayerConfig&, const Platform&)> extra = {}) {
  static std::atomic<int> counter{0};
  BackendDescriptor d;
  d.name = "synth_" + tag + "_" + std::to_string(counter++);
  d.summary = "synthetic selector-test backend";
  d.caps = std::move(caps);
  d.priority = priority;
  d.module = std::move(module);
  d.extra_checks = std::move(extra);
  Registry::instance().add(d);
  return d.name;
}

/// A layer only synthetic backends (and the any-size reference) can serve.
inline LayerConfig synthetic_layer(int head_size) {
  LayerConfig c;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_size = head_size;
  c.dtype = DType::float32;
  return c;
}

/// Sets (or, with nullopt, unsets) an environment variable for one scope, restoring it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value->c_str(), 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

/// True for the synthetic backends above (the conformance suite skips them).
inline bool is_synthetic(const std::string& name) { return name.rfind("synth_", 0) == 0; }

}  // namespace attn::test
