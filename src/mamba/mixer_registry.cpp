// The mixer backend registry: the built-ins of mixer_list.inc, plus add() / register_mixer() for
// custom mixers. No static-initializer self-registration: the list is read on first use.
#include <algorithm>
#include <atomic>
#include <mutex>

#include "attn/error.hpp"
#include "attn/mamba.hpp"
#include "core/names.hpp"

#define ATTN_MIXER(name) attn::MixerDescriptor name##_mixer_descriptor();
#include "mamba/mixer_list.inc"
#undef ATTN_MIXER

namespace attn {

namespace {

// Process-wide, so a generation names one state of one mixer registry (select_mamba's memo key).
uint64_t next_generation() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed) + 1;
}

std::vector<std::string> names_of(const std::vector<std::shared_ptr<const MixerDescriptor>>& list) {
  std::vector<std::string> names;
  for (const auto& d : list) names.push_back(d->name);
  return names;
}

std::string types_text(const std::vector<MambaType>& types) {
  std::vector<std::string> names;
  for (MambaType t : types) names.emplace_back(to_string(t));
  return join(names);
}

void add_builtins(MixerRegistry& r) {
#define ATTN_MIXER(name) r.add(name##_mixer_descriptor());
#include "mamba/mixer_list.inc"
#undef ATTN_MIXER
}

}  // namespace

MixerRegistry::MixerRegistry() : generation_(next_generation()) {}

MixerRegistry& MixerRegistry::instance() {
  static MixerRegistry r;
  static const bool filled = (add_builtins(r), true);  // once, before any caller sees r
  (void)filled;
  return r;
}

std::unique_ptr<MixerRegistry> MixerRegistry::with_builtins() {
  auto r = std::make_unique<MixerRegistry>();
  add_builtins(*r);
  return r;
}

void MixerRegistry::add(MixerDescriptor desc) {
  require(!desc.name.empty(), "desc.name", "''", "a non-empty backend name");
  require(!desc.caps.types.empty(), "desc.caps.types", "[]", "at least one mixer type served");
  require(bool(desc.create), "desc.create", "null", "a factory");
  std::unique_lock lock(mu_);
  for (const auto& d : list_)
    require(d->name != desc.name, "desc.name", desc.name, "a name not already registered (" + join(names_of(list_)) + ")");
  list_.push_back(std::make_shared<const MixerDescriptor>(std::move(desc)));
  generation_ = next_generation();
}

std::vector<std::shared_ptr<const MixerDescriptor>> MixerRegistry::backends() const {
  std::shared_lock lock(mu_);
  return list_;
}

uint64_t MixerRegistry::generation() const {
  std::shared_lock lock(mu_);
  return generation_;
}

std::shared_ptr<const MixerDescriptor> MixerRegistry::find(const std::string& name) const {
  for (const auto& d : backends())
    if (detail::same_backend_name(d->name, name)) return d;
  return nullptr;
}

std::vector<std::string> MixerRegistry::names() const { return names_of(backends()); }

std::unique_ptr<MixerImpl> MixerRegistry::create(const std::string& backend, const MixerParams& params) const {
  auto d = find(backend);
  if (!d) throw Error("mixer backend '" + backend + "' unknown (known mixer backends: " + join(names()) + ")");
  const std::vector<MambaType>& types = d->caps.types;
  const bool serves = std::find(types.begin(), types.end(), params.config.type) != types.end();
  require(serves, "params.config.type", to_string(params.config.type),
          "a type mixer backend '" + backend + "' serves (" + types_text(types) + ")");
  std::unique_ptr<MixerImpl> impl = d->create(params);
  impl->backend_ = backend;  // plans name the backend that made them
  return impl;
}

void register_mixer(MixerDescriptor desc) { MixerRegistry::instance().add(std::move(desc)); }

std::vector<std::shared_ptr<const MixerDescriptor>> mixer_backends() { return MixerRegistry::instance().backends(); }

std::shared_ptr<const MixerDescriptor> find_mixer(const std::string& name) { return MixerRegistry::instance().find(name); }

std::unique_ptr<MixerImpl> create_mixer(const std::string& backend, const MixerParams& params) {
  return MixerRegistry::instance().create(backend, params);
}

}  // namespace attn
