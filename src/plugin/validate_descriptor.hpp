#pragma once
// What Registry::add checks before a descriptor reaches the selector.
#include "attn/backend.hpp"

namespace attn::detail {

/// Throws attn::Error naming the backend and the first field that attn cannot use safely: an
/// enum value outside its type, a size rule that is empty, inverted, non-positive or steps by 0,
/// a preferred block size its own rule refuses, an unusable name, a missing factory.
void validate_descriptor(const BackendDescriptor& desc);

}  // namespace attn::detail
