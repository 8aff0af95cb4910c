#pragma once
// Internal: what the attention selector (selector.cpp) and the mixer selector (select_mamba.cpp)
// share: the forced-backend precedence, the "unknown backend" error, the platform part of a memo
// key, and the memo itself (decisions and errors, keyed by layer × platform × forced × registry
// generation; thread-safe; hit / miss counts).
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "attn/platform.hpp"
#include "attn/selector.hpp"

namespace attn::detail {

/// A backend forced by the user, and by what ("argument", "env ATTN_BACKEND", ...); empty name: none.
struct ForcedBackend {
  std::string name, by;
  bool operator==(const ForcedBackend&) const = default;
};

/// The first of `sources` ({value, label}, highest precedence first) that names a backend, else
/// env `env_var` (labelled "env <env_var>") when `use_env`; "" and "auto" in any case name none.
ForcedBackend forced_backend(std::initializer_list<std::pair<std::string_view, std::string_view>> sources, bool use_env,
                             const char* env_var);

/// "Unknown <what> backend: '<name>' (from <by>). Valid options are: <known>".
std::string unknown_backend_error(std::string_view what, const ForcedBackend& forced, const std::vector<std::string>& known);

/// "[field=value, expected ...; ...]": a candidate's reasons in an error message.
std::string reasons_text(const std::vector<Reason>& reasons);

/// The platform part of a memo key: the fingerprint, marked when it is a planning target rather
/// than this machine (tuning and module loading apply only to the machine itself).
std::string platform_key(const Platform& p, bool given);

/// A computed selection: the decision, or the error message select() must throw.
struct Outcome {
  Decision decision;
  std::string error;          // non-empty: select() throws this
  bool error_always = false;  // also thrown by explain() (forced-backend errors)
};

/// Outcomes memoised by (layer, platform, forced backend, registry generation). `Layer` is what
/// the selector decides for (LayerConfig, MambaType), hashed by `LayerHash`.
template <typename Layer, typename LayerHash>
class SelectionMemo {
 public:
  struct Key {
    Layer layer;
    std::string platform;
    ForcedBackend forced;
    uint64_t generation = 0;
    bool operator==(const Key&) const = default;
  };

  /// The stored outcome for `key`, else `compute()`'s (stored; computed outside the lock, so two
  /// threads may both compute a new key: the first stored wins). fresh(key, outcome) runs on a new one.
  template <typename Compute, typename Fresh>
  Outcome get(Key key, Compute&& compute, Fresh&& fresh) {
    {
      std::shared_lock lock(mu_);
      if (auto it = map_.find(key); it != map_.end()) {
        hits_.fetch_add(1, std::memory_order_relaxed);
        return it->second;
      }
    }
    misses_.fetch_add(1, std::memory_order_relaxed);
    Outcome o = compute();
    fresh(key, o);
    std::unique_lock lock(mu_);
    return map_.emplace(std::move(key), std::move(o)).first->second;
  }

  template <typename Compute>
  Outcome get(Key key, Compute&& compute) {
    return get(std::move(key), std::forward<Compute>(compute), [](const Key&, const Outcome&) {});
  }

  void clear() {
    std::unique_lock lock(mu_);
    map_.clear();
    hits_ = 0;
    misses_ = 0;
  }

  SelectorCacheStats stats() const {
    std::shared_lock lock(mu_);
    return {hits_.load(), misses_.load(), map_.size()};
  }

 private:
  struct KeyHash {
    std::size_t operator()(const Key& k) const {
      std::size_t h = LayerHash{}(k.layer);
      for (const std::string* s : {&k.platform, &k.forced.name, &k.forced.by})
        h = h * 1099511628211ull ^ std::hash<std::string>{}(*s);
      return h ^ k.generation;
    }
  };
  mutable std::shared_mutex mu_;
  std::unordered_map<Key, Outcome, KeyHash> map_;
  std::atomic<uint64_t> hits_{0}, misses_{0};
};

/// Returns the outcome's decision, or throws its error (`explaining`: only errors_always).
Decision decision_or_throw(const Outcome& o, bool explaining = false);

}  // namespace attn::detail
