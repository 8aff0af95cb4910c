#pragma once
// Internal: what select_mamba needs from the mixer registry beyond the public API.
#include <cstdint>
#include <string>
#include <vector>

namespace attn {
/// Bumped by every register_mixer(); select_mamba's cache keys on it.
uint64_t mixer_registry_generation();
std::vector<std::string> mixer_backend_names();
}  // namespace attn
