// A misbehaving plugin: attn_register adds a backend, then throws. Loading it must fail with
// "attn_register threw: ..." and leave no backend behind. Built twice: once throwing a
// std::runtime_error, once (ATTN_FIXTURE_THROW_NON_STD) throwing an int, which is not a std::exception.
#include <stdexcept>

#include "plugin_fixture/fixture_backend.hpp"

extern "C" int attn_abi_version() { return ATTN_ABI_VERSION; }

extern "C" void attn_register(attn::Registry& r) {
#ifdef ATTN_FIXTURE_THROW_NON_STD
  const char* name = "test_plugin_throws_int";
#else
  const char* name = "test_plugin_throws";
#endif
  // Priority 1000 would win every float32 head-80 layer if the rollback failed.
  r.add(fixture_backend(name, "registers, then throws", 80, 1000));
#ifdef ATTN_FIXTURE_THROW_NON_STD
  throw 42;
#else
  throw std::runtime_error("fixture failure in attn_register");
#endif
}
