#pragma once
/// The CPU kernel layer every CPU family (cpu_flash, cpu_mla / cpu_sparse, the mixers and their
/// conv) dispatches through: the kernel builds, the best one a platform runs, and the one override
/// ATTN_CPU_ISA=auto|amx|avx512_bf16|avx512|avx2|generic. Private to the library.
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attn/platform.hpp"

namespace attn::cpu {

/// Kernel builds, worst to best; each one's CPU needs what those below it need.
enum class Isa : int { generic = 0, avx2 = 1, avx512 = 2, avx512_bf16 = 3, amx = 4 };

inline constexpr const char* kIsaEnv = "ATTN_CPU_ISA";

std::string_view to_string(Isa isa);
/// Every build, best first.
const std::vector<Isa>& all_isas();

/// Linux keeps AMX tile data off until a process asks (arch_prctl ARCH_REQ_XCOMP_PERM); asked
/// once per process when this CPU has AMX. False where refused (old kernel, seccomp) or absent.
bool amx_permitted();
/// The best build `platform` runs (on the detected CPU, amx also needs amx_permitted()).
Isa best_isa(const Platform& platform);
/// The builds `platform` runs, best first.
std::vector<Isa> runnable_isas(const Platform& platform);
/// ATTN_CPU_ISA as a build: nullopt when unset, empty or "auto"; attn::Error for an unknown name.
std::optional<Isa> forced_isa();

/// The build a family whose kernel builds are `family` runs on `platform`: the forced or the best
/// build, capped at what `platform` runs, then the best of `family` at or below it (every family
/// has generic). Forcing a build the detected CPU cannot run is an attn::Error naming what it
/// can; a planning platform caps the request instead.
Isa choose(const Platform& platform, std::initializer_list<Isa> family);
/// The same without the override: the best of `family` that `platform` runs.
Isa best_of(const Platform& platform, std::initializer_list<Isa> family);

/// Names joined by ", " (for messages).
std::string join(const std::vector<Isa>& isas);

}  // namespace attn::cpu
