// A plugin that calls Registry::instance() from inside attn_register, as one that looks up a
// built-in backend to delegate to would. Under ATTN_PLUGINS this runs while instance() is
// still loading plugins; it must get the registry, not a deadlock or a recursive-init abort.
#include <stdexcept>

#include "plugin_fixture/fixture_backend.hpp"

extern "C" int attn_abi_version() { return ATTN_ABI_VERSION; }

extern "C" void attn_register(attn::Registry& r) {
  auto reference = attn::Registry::instance().find("reference");
  if (!reference) throw std::runtime_error("the reference backend is not registered");
  attn::BackendDescriptor d = fixture_backend(
      "test_plugin_reentrant", "out-of-tree test backend that found 'reference' through Registry::instance()", 72, 5);
  d.create = [reference](const attn::LayerParams& p) { return reference->create(p); };
  r.add(std::move(d));
}
