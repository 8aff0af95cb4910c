#pragma once
// Wrappers that keep a backend's callbacks (a plugin's code) from throwing anything but
// attn::Error into attn's callers: the selector, the CLI, the tuner, Python.
#include <functional>
#include <memory>
#include <string>

#include "attn/backend.hpp"

namespace attn::detail {

using BackendFactory = std::function<std::unique_ptr<AttentionImpl>(const LayerParams&)>;

/// `desc` with its callbacks wrapped: extra_checks that throws yields a Reason naming the
/// callback and the message; variant / variants / create that throw anything but attn::Error
/// throw an attn::Error naming the backend; create returning null throws one too.
void contain_callbacks(BackendDescriptor& desc);
/// `create` wrapped the same way, for Registry::provide.
BackendFactory contained_factory(const std::string& backend, BackendFactory create);

}  // namespace attn::detail
