// cpu_mla's attend kernel table over the CPU layer's builds (src/cpu/isa.hpp): amx >
// avx512_bf16 > avx512 > generic, forced by ATTN_CPU_ISA.
#include "attn/error.hpp"
#include "kernels/gather/mla_kernel.hpp"

namespace attn::mla {
namespace {

constexpr std::initializer_list<Isa> kLatentBuilds = {Isa::amx, Isa::avx512_bf16, Isa::avx512, Isa::generic};
// Separate K and V rows (block-sparse): never the AMX kernel.
constexpr std::initializer_list<Isa> kSplitBuilds = {Isa::avx512_bf16, Isa::avx512, Isa::generic};

}  // namespace

std::string_view variant_name(Isa isa) { return cpu::to_string(isa); }

Isa chosen_isa(const Platform& p, bool latent) { return cpu::choose(p, latent ? kLatentBuilds : kSplitBuilds); }

std::string variant_for(const Platform& p, bool latent) { return std::string(variant_name(chosen_isa(p, latent))); }

AttendFn best_attend(std::string* name) {
  const Isa isa = chosen_isa(detect_cpu());
  if (name) *name = variant_name(isa);
#if defined(__x86_64__)
  if (isa == Isa::amx) return attend_amx();
  if (isa == Isa::avx512_bf16) return attend_avx512_bf16();
  if (isa == Isa::avx512) return attend_avx512();
#endif
  return attend_portable();
}

bool amx_handles_storage(DType d) { return d == DType::bfloat16 || d == DType::fp8_e4m3 || d == DType::fp8_e5m2; }

bool bf16_handles_storage(DType d, int rank) { return amx_handles_storage(d) && rank % 16 == 0; }

}  // namespace attn::mla
