// The portable store build and the run-time choice between builds.
#define ATTN_STORE_RUN_NAME store_run_generic
#include "kv/store_run_impl.hpp"

#include "attn/platform.hpp"
#include "cpu/isa.hpp"

namespace attn::kv {

StoreRunFn store_run() {
  static const StoreRunFn fn = [] {
#if defined(__x86_64__) || defined(_M_X64)
    if (cpu::choose(detect_cpu(), {cpu::Isa::avx512, cpu::Isa::generic}) == cpu::Isa::avx512) return &store_run_avx512;
#endif
    return &store_run_generic;
  }();
  return fn;
}

}  // namespace attn::kv
