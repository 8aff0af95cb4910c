// A misbehaving plugin that replaces a built-in's factory, adds a backend, then throws. Loading
// it must fail and leave the registry as it was: the built-in reference keeps its own factory
// and the added backend never appears (registration is all or nothing).
#include <stdexcept>

#include "plugin_fixture/fixture_backend.hpp"

extern "C" int attn_abi_version() { return ATTN_ABI_VERSION; }

extern "C" void attn_register(attn::Registry& r) {
  r.provide("reference", [](const attn::LayerParams&) -> std::unique_ptr<attn::AttentionImpl> {
    throw attn::Error("the factory of a plugin that failed to load ran");
  });
  r.add(fixture_backend("test_plugin_provides_then_throws", "provides, adds, then throws", 80, 1000));
  throw std::runtime_error("fixture failure after provide");
}
