// The built-in backend list. Each backend folder defines `<name>_descriptor()`; one line in
// builtin_list.inc adds it. Explicit calls, no static-initializer self-registration.
#include "attn/registry.hpp"

namespace attn {

#define ATTN_BACKEND(name) BackendDescriptor name##_descriptor();
#include "backends/builtin_list.inc"
#undef ATTN_BACKEND

void register_builtin_backends(Registry& r) {
#define ATTN_BACKEND(name) r.add(name##_descriptor());
#include "backends/builtin_list.inc"
#undef ATTN_BACKEND
}

}  // namespace attn
