#pragma once
/// The CPU's features from cpuid, each only where the OS saves its registers (XCR0 via xgetbv):
/// AVX for avx2 / fma, the AVX-512 state for the AVX-512 features, the tile state for AMX (using
/// the tiles also needs the process's request, cpu::amx_permitted). attn::detect_cpu() runs it
/// once and adds the core count.
#include "attn/platform.hpp"

namespace attn::cpu {

/// Vendor, brand name and features of this CPU (kind, cores and `detected` are left to the caller).
Platform detect_features();

}  // namespace attn::cpu
