// An out-of-tree backend, built as its own shared library and loaded through ATTN_PLUGINS or
// attn::load_plugin. It serves one narrow configuration (head_size 80, float32) by delegating
// to the reference backend, which is enough to prove registration, selection and dispatch.
#include "plugin_fixture/fixture_backend.hpp"

extern "C" int attn_abi_version() { return ATTN_ABI_VERSION; }

extern "C" void attn_register(attn::Registry& r) {
  attn::BackendDescriptor d = fixture_backend("test_plugin", "out-of-tree test backend (head_size 80, float32)", 80, 5);
  d.create = [&r](const attn::LayerParams& p) { return r.find("reference")->create(p); };
  r.add(std::move(d));
}
