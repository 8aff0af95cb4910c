#pragma once
/// The backend registry: built-in backends (src/backends/builtin_list.inc), lazily loaded
/// shared modules, and out-of-tree plugins (ATTN_PLUGINS or load_plugin). No static-initializer
/// self-registration.
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "attn/backend.hpp"

/// ABI version a module or plugin must report (bump on any change to backend.hpp / registry.hpp).
#define ATTN_ABI_VERSION 4

namespace attn {
class Registry;
}

/// Entry points a module / plugin library exports (extern "C"):
///   int  attn_abi_version();                 // must return ATTN_ABI_VERSION
///   void attn_register(attn::Registry& r);   // plugins: r.add(...); modules: r.provide(...)
extern "C" {
typedef int (*attn_abi_version_fn)();
typedef void (*attn_register_fn)(attn::Registry&);
}

namespace attn {

class Registry {
 public:
  /// The process-wide registry with the built-ins registered and ATTN_PLUGINS loaded.
  static Registry& instance();
  /// A registry of its own holding the built-ins only (no ATTN_PLUGINS): what a caller adds to
  /// it (a test's stand-in backends) never reaches instance(). Select from it with
  /// SelectOptions::registry.
  static std::unique_ptr<Registry> with_builtins();

  /// Adds a backend. Throws attn::Error naming the backend and the field when the descriptor is
  /// unusable (validate_descriptor: names unique ignoring case, enums in range, size rules
  /// well-formed, a factory unless a module provides it) or the name is taken. Its callbacks are
  /// kept wrapped: only attn::Error leaves them (a throwing extra_checks is a Reason instead).
  /// Inside a plugin's or module's attn_register, what it adds and provides is staged and
  /// becomes visible only once attn_register returns normally.
  void add(BackendDescriptor desc);
  /// Provides the factory of a registered backend (a module for the backends it serves; a plugin
  /// may replace one). Throws attn::Error for a null factory or an unknown backend.
  void provide(const std::string& backend, std::function<std::unique_ptr<AttentionImpl>(const LayerParams&)> create);

  /// Provides the memory of `device` (called by the module that serves that device).
  void provide_allocator(DeviceKind device, std::shared_ptr<DeviceAllocator> allocator);
  /// The allocator of `device` for caches and workspaces: host memory for cpu; otherwise the one
  /// the module of a backend reading `device` provides (loaded on first need). Throws
  /// attn::Error with the module's reason when none can be loaded.
  std::shared_ptr<DeviceAllocator> allocator(DeviceKind device);

  /// Snapshot of all descriptors, in registration order.
  std::vector<std::shared_ptr<const BackendDescriptor>> backends() const;
  std::shared_ptr<const BackendDescriptor> find(const std::string& name) const;
  std::vector<std::string> names() const;

  /// Loads `desc.module` if needed. Returns false and sets `why` if it cannot be loaded.
  bool ensure_module(const BackendDescriptor& desc, std::string& why);
  /// Builds the implementation of `backend` for one layer (loads its module first).
  std::unique_ptr<AttentionImpl> create(const std::string& backend, const LayerParams& params);

  /// Loads an out-of-tree backend library; throws attn::Error with the reason on failure.
  void load_plugin(const std::string& path);
  /// Errors from ATTN_PLUGINS entries that failed to load at start-up.
  std::vector<std::string> plugin_errors() const;
  /// Changes on every add/provide, and no two registries share a value; the selector cache keys on it.
  uint64_t generation() const;

  Registry();  // empty registry; instance() and with_builtins() fill the built-ins

 private:
  struct Module { bool tried = false; bool ok = false; std::string why; void* handle = nullptr; };
  struct Stage;  // what one attn_register added / provided, not yet visible (registry.cpp)
  static Stage*& current_stage();  // this thread's innermost registration in progress
  Stage* stage_for_this_thread();
  /// Runs a library's attn_register with its changes staged; commits them only if it returns
  /// normally. Returns "" or why the library was not registered.
  std::string register_staged(attn_register_fn reg);
  void commit(Stage& stage);
  mutable std::shared_mutex mu_;
  std::vector<std::shared_ptr<BackendDescriptor>> backends_;
  std::unordered_map<std::string, Module> modules_;
  std::shared_ptr<DeviceAllocator> cuda_allocator_;
  std::vector<std::string> plugin_errors_;
  uint64_t generation_;
  std::mutex module_mu_;
};

/// Convenience for C++ callers.
void load_plugin(const std::string& path);

}  // namespace attn
