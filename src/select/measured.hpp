#pragma once
// The selector's use of a tuning file: the fastest valid measured choice of a layer config.
#include <optional>
#include <string>
#include <vector>

#include "attn/backend.hpp"
#include "attn/selector.hpp"
#include "attn/tune.hpp"

namespace attn::detail {

/// Whether `desc`, valid for `config`, also serves it with blocks of `block_size` (its block-size
/// rule and its extra checks).
bool block_size_allowed(const BackendDescriptor& desc, const LayerConfig& config, const Platform& platform, int block_size);

struct MeasuredPick {
  std::string backend;
  std::string variant;  // "" for a backend with one variant
  int block_size = 0;
  std::string note;     // why, for Decision::notes
};

/// The fastest measured choice that is valid now (its backend among the valid `candidates`, a
/// variant it offers, a block size it allows and equal to the user's when set). Ties within the
/// timing noise go to the better priority, then the backend's own variant and block size.
/// Null when the tuning has no valid measured choice for `config`. `reg` holds the candidates.
std::optional<MeasuredPick> measured_pick(const Registry& reg, const TuningFile& tuning, const LayerConfig& config,
                                          const std::vector<Candidate>& candidates, const Platform& platform);

}  // namespace attn::detail
