// The mixer backend registry: the built-ins of mixer_list.inc, plus register_mixer() for custom
// mixers. No static-initializer self-registration: the list is read on first use.
#include <mutex>
#include <shared_mutex>

#include "attn/error.hpp"
#include "attn/mamba.hpp"
#include "core/names.hpp"
#include "mamba/mixer_registry.hpp"

#define ATTN_MIXER(name) attn::MixerDescriptor name##_mixer_descriptor();
#include "mamba/mixer_list.inc"
#undef ATTN_MIXER

namespace attn {

namespace {
struct MixerRegistry {
  std::shared_mutex mu;
  std::vector<std::shared_ptr<const MixerDescriptor>> list;
  uint64_t generation = 0;

  MixerRegistry() {
#define ATTN_MIXER(name) list.push_back(std::make_shared<const MixerDescriptor>(name##_mixer_descriptor()));
#include "mamba/mixer_list.inc"
#undef ATTN_MIXER
  }
};

MixerRegistry& registry() {
  static MixerRegistry r;
  return r;
}

std::vector<std::string> names_of(const std::vector<std::shared_ptr<const MixerDescriptor>>& list) {
  std::vector<std::string> names;
  for (const auto& d : list) names.push_back(d->name);
  return names;
}
}  // namespace

void register_mixer(MixerDescriptor desc) {
  require(!desc.name.empty(), "desc.name", "''", "a non-empty backend name");
  require(!desc.caps.types.empty(), "desc.caps.types", "[]", "at least one mixer type served");
  require(bool(desc.create), "desc.create", "null", "a factory");
  MixerRegistry& r = registry();
  std::unique_lock lock(r.mu);
  for (const auto& d : r.list)
    require(d->name != desc.name, "desc.name", desc.name, "a name not already registered (" + join(names_of(r.list)) + ")");
  r.list.push_back(std::make_shared<const MixerDescriptor>(std::move(desc)));
  ++r.generation;
}

std::vector<std::shared_ptr<const MixerDescriptor>> mixer_backends() {
  MixerRegistry& r = registry();
  std::shared_lock lock(r.mu);
  return r.list;
}

uint64_t mixer_registry_generation() {
  MixerRegistry& r = registry();
  std::shared_lock lock(r.mu);
  return r.generation;
}

std::shared_ptr<const MixerDescriptor> find_mixer(const std::string& name) {
  for (const auto& d : mixer_backends())
    if (detail::same_backend_name(d->name, name)) return d;
  return nullptr;
}

std::vector<std::string> mixer_backend_names() { return names_of(mixer_backends()); }

std::unique_ptr<MixerImpl> create_mixer(const std::string& backend, const MixerParams& params) {
  auto d = find_mixer(backend);
  if (!d) {
    throw Error("mixer backend '" + backend + "' unknown (known mixer backends: " + join(mixer_backend_names()) + ")");
  }
  bool serves = false;
  for (MambaType t : d->caps.types) serves |= t == params.config.type;
  std::vector<std::string> types;
  for (MambaType t : d->caps.types) types.emplace_back(to_string(t));
  require(serves, "params.config.type", to_string(params.config.type),
          "a type mixer backend '" + backend + "' serves (" + join(types) + ")");
  std::unique_ptr<MixerImpl> impl = d->create(params);
  impl->backend_ = backend;  // plans name the backend that made them
  return impl;
}

}  // namespace attn
