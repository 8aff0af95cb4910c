#pragma once
// ATTN_CPU_ISA for the tests: force one kernel build for a scope, or run a check once per build
// this CPU runs. Every CPU family (cpu_flash, cpu_mla / cpu_sparse, the mixers and their conv)
// picks its build through src/cpu/isa.hpp when an implementation is created.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "attn/platform.hpp"
#include "cpu/isa.hpp"

namespace attn::test {

/// Sets ATTN_CPU_ISA for the scope and restores what was there.
class ForceCpuIsa {
 public:
  explicit ForceCpuIsa(cpu::Isa isa) : ForceCpuIsa(std::string(cpu::to_string(isa))) {}
  explicit ForceCpuIsa(const std::string& name) {
    if (const char* old = std::getenv(cpu::kIsaEnv)) old_ = old;
    setenv(cpu::kIsaEnv, name.c_str(), 1);
  }
  ~ForceCpuIsa() { old_ ? setenv(cpu::kIsaEnv, old_->c_str(), 1) : unsetenv(cpu::kIsaEnv); }
  ForceCpuIsa(const ForceCpuIsa&) = delete;
  ForceCpuIsa& operator=(const ForceCpuIsa&) = delete;

 private:
  std::optional<std::string> old_;
};

/// The builds this CPU runs that a family with kernel builds `family` has, best first.
inline std::vector<cpu::Isa> family_isas_here(std::initializer_list<cpu::Isa> family) {
  std::vector<cpu::Isa> out;
  for (cpu::Isa isa : cpu::runnable_isas(detect_cpu()))
    if (std::find(family.begin(), family.end(), isa) != family.end()) out.push_back(isa);
  return out;
}

/// Runs body(isa) once per build in `isas`, ATTN_CPU_ISA set to it and named in every failure.
template <typename F>
void for_each_cpu_isa(const std::vector<cpu::Isa>& isas, F&& body) {
  for (cpu::Isa isa : isas) {
    SCOPED_TRACE(std::string("ATTN_CPU_ISA=") + std::string(cpu::to_string(isa)));
    ForceCpuIsa force(isa);
    body(isa);
  }
}

}  // namespace attn::test
