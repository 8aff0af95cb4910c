#include "backends/cpu_flash/isa.hpp"

#include <algorithm>
#include <cstdlib>

#include "attn/error.hpp"
#include "backends/cpu_flash/decode.hpp"

namespace attn::cpu_flash {

std::string_view to_string(Isa isa) {
  switch (isa) {
    case Isa::avx512_bf16: return "avx512_bf16";
    case Isa::avx512: return "avx512";
    case Isa::avx2: return "avx2";
    default: return "generic";
  }
}

Isa best_isa(const Platform& p) {
#if defined(__x86_64__) || defined(_M_X64)
  const bool avx512 = p.has(CpuFeature::avx512f) && p.has(CpuFeature::avx512bw) && p.has(CpuFeature::avx512vl);
  if (avx512 && p.has(CpuFeature::avx512_bf16)) return Isa::avx512_bf16;
  if (avx512) return Isa::avx512;
  if (p.has(CpuFeature::avx2) && p.has(CpuFeature::fma)) return Isa::avx2;
#endif
  return Isa::generic;
}

Isa chosen_isa(const Platform& p) {
  const Isa best = best_isa(p);
  const char* env = std::getenv("ATTN_CPU_ISA");
  if (!env || !*env || std::string_view(env) == "auto") return best;
  for (Isa isa : {Isa::avx512_bf16, Isa::avx512, Isa::avx2, Isa::generic})
    if (to_string(isa) == env) return std::min(isa, best);
  throw Error(std::string("ATTN_CPU_ISA=") + env + " invalid: expected one of auto, avx512_bf16, avx512, avx2, generic");
}

ItemFn kernel_for(Isa isa, KvType kv, DType q) {
  const int k = int(kv);
#if defined(__x86_64__) || defined(_M_X64)
  if (isa == Isa::avx512_bf16 && q == DType::bfloat16 && kernels_avx512_bf16().by_kv[k]) return kernels_avx512_bf16().by_kv[k];
  if (isa >= Isa::avx512) return kernels_avx512().by_kv[k];
  if (isa == Isa::avx2) return kernels_avx2().by_kv[k];
#endif
  return kernels_generic().by_kv[k];
}

namespace {
bool has_vbmi() {
  static const bool yes = detect_cpu().has(CpuFeature::avx512_vbmi);
  return yes;
}
}  // namespace

ItemFn decode_kernel_for(Isa isa, KvType kv, DType q, int head_size) {
#if defined(__x86_64__) || defined(_M_X64)
  const bool bf16_dot = isa == Isa::avx512_bf16 && q == DType::bfloat16;
  if (bf16_dot && kv == KvType::e4m3 && head_size % 64 == 0 && decode_head_size(head_size) && has_vbmi())
    return decode_kernel_avx512_e4m3_dot();
  if (isa >= Isa::avx512 && decode_head_size(head_size)) return decode_kernel_avx512(kv, bf16_dot && kv == KvType::bf16);
#endif
  return nullptr;
}

}  // namespace attn::cpu_flash
