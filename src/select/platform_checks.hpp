#pragma once
// Internal: the platform checks of the generic checker (checker.cpp), shared by the attention
// backends' check_capabilities and the mixers' check_mixer_capabilities, so both name a platform
// they cannot serve with the same Reason.
#include <optional>
#include <vector>

#include "attn/capabilities.hpp"
#include "attn/platform.hpp"

namespace attn::detail {

/// `platform` when p's kind is not one of `platforms`.
std::optional<Reason> platform_reason(const std::vector<PlatformKind>& platforms, const Platform& p);
/// On a cuda platform `compute_capability` outside [min_cc, max_cc]; on a cpu platform
/// `cpu_features` when some of `required` are missing.
std::optional<Reason> machine_reason(const std::vector<CpuFeature>& required, const std::optional<ComputeCapability>& min_cc,
                                     const std::optional<ComputeCapability>& max_cc, const Platform& p);

}  // namespace attn::detail
