#pragma once
// Helpers for the cpu_flash tests: run a check under every ISA variant this CPU can run, and
// the smaller case set for sanitizer / quick runs (ATTN_TEST_QUICK).
#include <cstdlib>
#include <string>
#include <vector>

#include "attn/platform.hpp"
#include "backends/cpu_flash/isa.hpp"
#include "support/cpu_isa_env.hpp"

namespace attn::cpu_flash::test {

inline bool quick() {
  const char* q = std::getenv("ATTN_TEST_QUICK");
  return q && *q && std::string(q) != "0";
}

/// Every variant up to the best this machine runs, best first.
inline std::vector<Isa> variants() {
  std::vector<Isa> out;
  for (int i = int(best_isa(detect_cpu())); i >= 0; --i) out.push_back(Isa(i));
  return out;
}

/// Sets ATTN_CPU_ISA for the scope (implementations pick their ISA when created).
using ForceIsa = attn::test::ForceCpuIsa;

}  // namespace attn::cpu_flash::test
