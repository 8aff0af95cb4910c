#pragma once
// Selector-test helpers. Synthetic backends live in a test's own TestRegistry (the built-ins plus
// what the test adds), never in Registry::instance(), so no other test or suite sees them; the
// test selects from it through TestRegistry::options(). Each is named "synth_<tag>_<n>" and
// serves only its head size of 1000 and more. Their factory refuses to build: selection only.
#include <atomic>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "attn/error.hpp"
#include "attn/registry.hpp"
#include "attn/selector.hpp"

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

/// A test's own registry: the built-in backends plus the synthetic ones the test adds.
class TestRegistry {
 public:
  Registry& registry() { return *reg_; }

  /// Registers a synthetic backend; returns its unique name.
  std::string add_synthetic(const std::string& tag, Capabilities caps, int priority, std::string module = {},
                            std::function<std::vector<Reason>(const LayerConfig&, const Platform&)> extra = {}) {
    static std::atomic<int> counter{0};
    BackendDescriptor d;
    d.name = "synth_" + tag + "_" + std::to_string(counter++);
    d.summary = "synthetic selector-test backend";
    d.caps = std::move(caps);
    d.priority = priority;
    d.module = std::move(module);
    d.extra_checks = std::move(extra);
    if (d.module.empty())  // a module backend's factory comes from its module
      d.create = [](const LayerParams&) -> std::unique_ptr<AttentionImpl> { throw Error("synthetic backends only select"); };
    reg_->add(d);
    return d.name;
  }

  /// Options selecting from this registry (ATTN_BACKEND read as usual unless use_env is cleared).
  SelectOptions options() {
    SelectOptions o;
    o.registry = reg_.get();
    return o;
  }

 private:
  std::unique_ptr<Registry> reg_ = Registry::with_builtins();
};

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

}  // namespace attn::test
