// Run-time choice of the MLA attend kernel: amx > avx512bf16 > avx512 > portable, capped by
// ATTN_MLA_ISA.
#include <cstdlib>

#include "attn/error.hpp"
#include "backends/cpu_mla/mla_kernel.hpp"

#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace attn::mla {
namespace {

// Linux keeps AMX tile data (XFEATURE_XTILEDATA) off until a process asks for it; the request
// is process-wide, so once is enough. Any failure (old kernel, seccomp) means no AMX.
bool amx_permitted() {
#if defined(__x86_64__) && defined(__linux__)
  static const bool ok = [] {
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
#else
  return false;
#endif
}

MlaIsa best_isa(const Platform& p, bool latent) {
#if defined(__x86_64__)
  const bool avx512 = p.has(CpuFeature::avx512f) && p.has(CpuFeature::avx512bw) && p.has(CpuFeature::avx512vl);
  const bool amx = avx512 && p.has(CpuFeature::avx512_bf16) && p.has(CpuFeature::amx_tile) && p.has(CpuFeature::amx_bf16);
#if defined(__linux__)
  if (latent && amx && (!p.detected || amx_permitted())) return MlaIsa::amx;
#endif
  if (avx512 && p.has(CpuFeature::avx512_bf16)) return MlaIsa::avx512_bf16;
  if (avx512) return MlaIsa::avx512;
#endif
  return MlaIsa::portable;
}

}  // namespace

std::string_view to_string(MlaIsa isa) {
  switch (isa) {
    case MlaIsa::amx: return "amx";
    case MlaIsa::avx512_bf16: return "avx512bf16";
    case MlaIsa::avx512: return "avx512";
    default: return "portable";
  }
}

MlaIsa chosen_isa(const Platform& p, bool latent) {
  const MlaIsa best = best_isa(p, latent);
  const char* env = std::getenv("ATTN_MLA_ISA");
  if (!env || !*env || std::string_view(env) == "auto") return best;
  const std::string_view want(env);
  for (MlaIsa isa : {MlaIsa::amx, MlaIsa::avx512_bf16, MlaIsa::avx512, MlaIsa::portable})
    if (want == to_string(isa) || (isa == MlaIsa::portable && want == "generic")) return std::min(isa, best);
  throw Error(std::string("ATTN_MLA_ISA=") + env + " invalid: expected one of auto, amx, avx512bf16, avx512, generic");
}

std::string variant_for(const Platform& p, bool latent) { return std::string(to_string(chosen_isa(p, latent))); }

AttendFn best_attend(std::string* name) {
  const MlaIsa isa = chosen_isa(detect_cpu());
  if (name) *name = to_string(isa);
#if defined(__x86_64__)
  if (isa == MlaIsa::amx) return attend_amx();
  if (isa == MlaIsa::avx512_bf16) return attend_avx512_bf16();
  if (isa == MlaIsa::avx512) return attend_avx512();
#endif
  return attend_portable();
}

bool amx_handles_storage(DType d) { return d == DType::bfloat16 || d == DType::fp8_e4m3 || d == DType::fp8_e5m2; }

bool bf16_handles_storage(DType d, int rank) { return amx_handles_storage(d) && rank % 16 == 0; }

}  // namespace attn::mla
