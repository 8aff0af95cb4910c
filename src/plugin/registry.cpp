#include "attn/registry.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <thread>

#include "attn/error.hpp"
#include "attn/selector.hpp"
#include "core/log.hpp"
#include "core/names.hpp"
#include "plugin/contain_callbacks.hpp"
#include "plugin/module_path.hpp"
#include "plugin/validate_descriptor.hpp"

namespace attn {

void register_builtin_backends(Registry& r);  // src/backends/registry.cpp

namespace {

// Opens a shared library and checks its ABI; returns the handle or sets `why`.
void* open_library(const std::string& path, std::string& why, attn_register_fn& reg) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    why = e ? e : ("cannot open " + path);
    return nullptr;
  }
  auto abi = reinterpret_cast<attn_abi_version_fn>(dlsym(h, "attn_abi_version"));
  reg = reinterpret_cast<attn_register_fn>(dlsym(h, "attn_register"));
  if (!abi || !reg) {
    why = path + " does not export attn_abi_version / attn_register";
    dlclose(h);
    return nullptr;
  }
  if (abi() != ATTN_ABI_VERSION) {
    why = path + " was built for ABI version " + std::to_string(abi()) + ", expected " + std::to_string(ATTN_ABI_VERSION);
    dlclose(h);
    return nullptr;
  }
  return h;
}

// Runs a library's attn_register; returns "" on success, else what it threw. Nothing a plugin
// throws may escape into the caller (the selector, the CLI), whatever its type.
std::string call_register(attn_register_fn reg, Registry& r) {
  try {
    reg(r);
    return {};
  } catch (const std::exception& e) {
    const std::string what = e.what();
    return what.empty() ? "an exception with no message" : what;
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

// Process-wide, so a generation names one state of one registry (the selector cache's key).
uint64_t next_generation() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed) + 1;
}

}  // namespace

Registry::Registry() : generation_(next_generation()) {}

std::unique_ptr<Registry> Registry::with_builtins() {
  auto reg = std::make_unique<Registry>();
  register_builtin_backends(*reg);
  return reg;
}

namespace {

// ATTN_PLUGINS runs each plugin's attn_register, and a plugin may itself call
// Registry::instance(). Loading plugins inside the function-local static's initializer would
// re-enter that initializer (deadlock or std::terminate), so the registry is built first and
// the plugins load afterwards, once, under this state.
enum class PluginLoad { pending, loading, done };
std::mutex g_plugin_mu;
std::condition_variable g_plugin_cv;
PluginLoad g_plugin_state = PluginLoad::pending;
std::thread::id g_plugin_loader;
std::atomic<bool> g_plugins_loaded{false};  // lock-free fast path once loading is over

void load_env_plugins(Registry& reg, std::vector<std::string>& errors) {
  const char* env = std::getenv("ATTN_PLUGINS");
  if (!env) return;
  std::string s = env;
  std::size_t start = 0;
  while (start <= s.size()) {
    std::size_t end = s.find(':', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) {
      const std::string path = s.substr(start, end - start);
      try {
        reg.load_plugin(path);
      } catch (const Error& e) {  // load_plugin turns every other failure into an Error
        log_warning(std::string("ATTN_PLUGINS: ") + e.what());
        errors.push_back(e.what());
      }
    }
    start = end + 1;
  }
}

}  // namespace

Registry& Registry::instance() {
  static Registry* r = [] {
    auto* reg = new Registry();  // never destroyed: modules may hold references at exit
    register_builtin_backends(*reg);
    return reg;
  }();
  if (g_plugins_loaded.load(std::memory_order_acquire)) return *r;
  std::unique_lock lock(g_plugin_mu);
  if (g_plugin_state == PluginLoad::done) return *r;
  // A plugin's attn_register calling back in (same thread) gets the registry as it stands.
  if (g_plugin_state == PluginLoad::loading && g_plugin_loader == std::this_thread::get_id()) return *r;
  if (g_plugin_state == PluginLoad::loading) {
    g_plugin_cv.wait(lock, [] { return g_plugin_state == PluginLoad::done; });
    return *r;
  }
  g_plugin_state = PluginLoad::loading;
  g_plugin_loader = std::this_thread::get_id();
  lock.unlock();
  std::vector<std::string> errors;
  load_env_plugins(*r, errors);
  {
    std::unique_lock reg_lock(r->mu_);
    r->plugin_errors_.insert(r->plugin_errors_.end(), errors.begin(), errors.end());
  }
  lock.lock();
  g_plugin_state = PluginLoad::done;
  g_plugins_loaded.store(true, std::memory_order_release);
  g_plugin_cv.notify_all();
  return *r;
}

// What one attn_register added and provided, kept out of the registry until it returns normally
// (all or nothing: a plugin that throws halfway leaves no backend and no replaced factory).
struct Registry::Stage {
  Registry* registry;
  Stage* outer;  // a registration in progress further up this thread (a plugin loading a plugin)
  std::vector<std::shared_ptr<BackendDescriptor>> added;
  std::vector<std::pair<std::string, detail::BackendFactory>> provided;  // registered name → factory
  std::shared_ptr<DeviceAllocator> cuda_allocator;
};

Registry::Stage*& Registry::current_stage() {
  thread_local Stage* stage = nullptr;
  return stage;
}

Registry::Stage* Registry::stage_for_this_thread() {
  for (Stage* s = current_stage(); s; s = s->outer)
    if (s->registry == this) return s;
  return nullptr;
}

namespace {

using Backends = std::vector<std::shared_ptr<BackendDescriptor>>;

BackendDescriptor* named(const Backends& list, const std::string& name) {
  for (auto& b : list)
    if (detail::same_backend_name(b->name, name)) return b.get();
  return nullptr;
}

// Lookup ignores case (ATTN_BACKEND=CPU_FLASH), so names must differ in more than case.
void require_unique(const Backends& list, const std::string& name) {
  const BackendDescriptor* b = named(list, name);
  if (!b) return;
  std::string msg = "backend '" + name + "' is already registered";
  if (b->name != name) msg += " (as '" + b->name + "'; backend names compare ignoring case)";
  throw Error(msg);
}

}  // namespace

void Registry::add(BackendDescriptor desc) {
  detail::validate_descriptor(desc);
  detail::contain_callbacks(desc);
  auto d = std::make_shared<BackendDescriptor>(std::move(desc));
  if (Stage* stage = stage_for_this_thread()) {
    {
      std::shared_lock lock(mu_);
      require_unique(backends_, d->name);
    }
    require_unique(stage->added, d->name);
    stage->added.push_back(std::move(d));
    return;
  }
  std::unique_lock lock(mu_);
  require_unique(backends_, d->name);
  backends_.push_back(std::move(d));
  generation_ = next_generation();
}

void Registry::provide(const std::string& backend, std::function<std::unique_ptr<AttentionImpl>(const LayerParams&)> create) {
  require(bool(create), "provide(" + backend + ").create", "null", "a factory");
  const auto not_declared = [&] { return Error("provide: backend '" + backend + "' is not declared in the core registry"); };
  if (Stage* stage = stage_for_this_thread()) {
    if (BackendDescriptor* b = named(stage->added, backend)) {
      b->create = detail::contained_factory(b->name, std::move(create));
      return;
    }
    std::shared_lock lock(mu_);
    const BackendDescriptor* b = named(backends_, backend);
    if (!b) throw not_declared();
    stage->provided.emplace_back(b->name, detail::contained_factory(b->name, std::move(create)));
    return;
  }
  std::unique_lock lock(mu_);
  for (auto& b : backends_) {
    if (detail::same_backend_name(b->name, backend)) {
      auto copy = std::make_shared<BackendDescriptor>(*b);
      copy->create = detail::contained_factory(b->name, std::move(create));
      b = copy;  // readers holding the old snapshot keep it alive
      generation_ = next_generation();
      return;
    }
  }
  throw not_declared();
}

void Registry::commit(Stage& stage) {
  if (Stage* outer = stage_for_this_thread()) {  // part of an enclosing registration: it commits
    for (auto& d : stage.added) require_unique(outer->added, d->name);
    outer->added.insert(outer->added.end(), stage.added.begin(), stage.added.end());
    outer->provided.insert(outer->provided.end(), stage.provided.begin(), stage.provided.end());
    if (stage.cuda_allocator) outer->cuda_allocator = stage.cuda_allocator;
    return;
  }
  std::unique_lock lock(mu_);
  // Checked again under the lock: another thread may have taken a name since; nothing changes
  // until every check has passed.
  for (auto& d : stage.added) require_unique(backends_, d->name);
  for (auto& [name, create] : stage.provided) {
    for (auto& b : backends_) {
      if (b->name != name) continue;
      auto copy = std::make_shared<BackendDescriptor>(*b);
      copy->create = std::move(create);
      b = copy;
    }
  }
  backends_.insert(backends_.end(), stage.added.begin(), stage.added.end());
  if (stage.cuda_allocator) cuda_allocator_ = stage.cuda_allocator;
  if (!stage.added.empty() || !stage.provided.empty()) generation_ = next_generation();
}

std::string Registry::register_staged(attn_register_fn reg) {
  Stage stage{this, current_stage(), {}, {}, nullptr};
  current_stage() = &stage;
  const std::string threw = call_register(reg, *this);  // catches everything
  current_stage() = stage.outer;
  if (!threw.empty()) return "attn_register threw: " + threw;  // the stage is dropped
  try {
    commit(stage);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

void Registry::provide_allocator(DeviceKind device, std::shared_ptr<DeviceAllocator> allocator) {
  require(device == DeviceKind::cuda, "device", "cpu", "cuda (host memory is built in)");
  require(allocator != nullptr && allocator->device() == device, "allocator", "null or another device's", "a cuda allocator");
  if (Stage* stage = stage_for_this_thread()) {
    stage->cuda_allocator = std::move(allocator);
    return;
  }
  std::unique_lock lock(mu_);
  cuda_allocator_ = std::move(allocator);
}

std::shared_ptr<DeviceAllocator> Registry::allocator(DeviceKind device) {
  if (device == DeviceKind::cpu) return host_allocator();
  std::string why = "no backend reads cuda memory";
  for (const auto& d : backends()) {
    if (d->device != device) continue;
    if (!ensure_module(*d, why)) why = "module " + d->module + " not loaded: " + why;
    std::shared_lock lock(mu_);
    if (cuda_allocator_) return cuda_allocator_;
  }
  throw Error("device=cuda invalid: expected a device with memory (" + why + ")");
}

std::vector<std::shared_ptr<const BackendDescriptor>> Registry::backends() const {
  std::shared_lock lock(mu_);
  return {backends_.begin(), backends_.end()};
}

std::shared_ptr<const BackendDescriptor> Registry::find(const std::string& name) const {
  std::shared_lock lock(mu_);
  for (auto& b : backends_) if (detail::same_backend_name(b->name, name)) return b;
  return nullptr;
}

std::vector<std::string> Registry::names() const {
  std::shared_lock lock(mu_);
  std::vector<std::string> out;
  for (auto& b : backends_) out.push_back(b->name);
  return out;
}

uint64_t Registry::generation() const {
  std::shared_lock lock(mu_);
  return generation_;
}

bool Registry::ensure_module(const BackendDescriptor& desc, std::string& why) {
  if (desc.module.empty()) return true;
  std::lock_guard guard(module_mu_);
  Module* m;
  {
    std::unique_lock lock(mu_);
    m = &modules_[desc.module];
  }
  if (!m->tried) {
    m->tried = true;
    std::string last_why = "lib" + desc.module + ".so not found";
    for (const std::string& path : detail::module_candidates(desc.module)) {
      attn_register_fn reg = nullptr;
      void* h = open_library(path, last_why, reg);
      if (!h) continue;
      last_why = register_staged(reg);
      if (last_why.empty()) {
        m->ok = true;
        m->handle = h;
        break;
      }
    }
    if (!m->ok) m->why = last_why;
    else log_info("loaded module " + desc.module);
  }
  why = m->why;
  if (m->ok) {
    auto current = find(desc.name);
    if (!current || !current->create) {
      why = "module " + desc.module + " loaded but did not provide backend " + desc.name;
      return false;
    }
  }
  return m->ok;
}

std::unique_ptr<AttentionImpl> Registry::create(const std::string& backend, const LayerParams& params) {
  auto desc = find(backend);
  if (!desc) throw Error("Unknown attention backend: '" + backend + "'. Valid options are: " + join(names()));
  std::string why;
  if (!ensure_module(*desc, why)) throw Error("backend " + backend + ": module " + desc->module + " not loaded: " + why);
  desc = find(backend);  // the module may have provided the factory
  if (!desc->create) throw Error("backend " + backend + " has no implementation on this machine");
  // A backend with variants checks the name itself (it knows which its build offers).
  if (!params.variant.empty() && !desc->variants)
    throw Error("variant='" + params.variant + "' invalid for backend " + backend +
                ": expected \"\" (it has one kernel variant)");
  params.validate();
  // The implementation is built only for a layer its descriptor serves here (the selector's one
  // checker), so a constructor need not check its capabilities again. A CUDA backend's platform
  // is the GPU its module found, which its own create checks.
  if (desc->device == DeviceKind::cpu) {
    const Candidate checked = evaluate(*desc, params.config, detect_cpu());
    if (!checked.valid) {
      std::string reasons;
      for (const Reason& r : checked.reasons) reasons += (reasons.empty() ? "" : "; ") + r.to_string();
      throw Error("backend " + backend + " cannot serve this layer on " + detect_cpu().to_string() + ": [" + reasons + "]");
    }
  }
  return desc->create(params);
}

void Registry::load_plugin(const std::string& path) {
  std::string why;
  attn_register_fn reg = nullptr;
  void* h = open_library(path, why, reg);
  if (!h) throw Error("plugin '" + path + "' not loaded: " + why);
  // The library stays open even when it is refused: the dropped descriptors' code lives in it.
  const std::string refused = register_staged(reg);
  if (!refused.empty()) throw Error("plugin '" + path + "' not loaded: " + refused);
  log_info("loaded plugin " + path);
}

std::vector<std::string> Registry::plugin_errors() const {
  std::shared_lock lock(mu_);
  return plugin_errors_;
}

void load_plugin(const std::string& path) { Registry::instance().load_plugin(path); }

}  // namespace attn
