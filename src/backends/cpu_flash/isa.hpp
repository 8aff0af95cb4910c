#pragma once
/// cpu_flash's kernel table over the CPU layer's builds (src/cpu/isa.hpp): generic, avx2, avx512,
/// avx512_bf16 and amx (avx512_bf16 with the bf16 prefill tiles' products on AMX); ATTN_CPU_ISA
/// forces one. Tests use the override to cover every variant.
#include <string>
#include <string_view>
#include <vector>

#include "attn/platform.hpp"
#include "backends/cpu_flash/kernel_args.hpp"
#include "cpu/isa.hpp"

namespace attn::cpu_flash {

using cpu::Isa;
using cpu::to_string;

/// The best variant `platform` can run.
Isa best_isa(const Platform& platform);
/// best_isa, or the one ATTN_CPU_ISA forces (cpu::choose: attn::Error for an unknown name or a
/// build this CPU cannot run).
Isa chosen_isa(const Platform& platform);
/// The build the prefill tiles of a layer running `isa` use: avx512 (fp32 tiles) where this CPU's
/// bf16 dot products are slower than its fp32 FMA, unless the build was `named` (a variant the
/// caller asked for) or forced by ATTN_CPU_ISA; else `isa`.
Isa tile_isa(Isa isa, bool named);
/// The ISA a layer's kernels run at when `isa` is chosen: avx512_bf16 only where one of them takes
/// bf16 dot products (bf16 q on a cache whose values bf16 holds exactly: bf16, fp8 and int8 codes,
/// int4 and nvfp4 rows unpacked; an even head size for the byte formats' tiles), else avx512,
/// which then runs. What the descriptor shows as the layer's variant and what its impl runs.
Isa layer_isa(Isa isa, const LayerConfig& c);
/// The variants `platform` can run, best first (BackendDescriptor::variants).
std::vector<std::string> isa_variants(const Platform& platform);
/// LayerParams::variant: "" = chosen_isa; else one of isa_variants (attn::Error otherwise).
Isa isa_for_variant(const std::string& variant, const Platform& platform);
/// The item kernel for this ISA, cache type and q dtype (falls back to the next variant down
/// when a build has no kernel for the combination, e.g. bf16 dot products for fp16 q).
ItemFn kernel_for(Isa isa, KvType kv, DType q);
/// The decode kernel (items of at most kDecodeMaxRows rows) for this ISA and the step's cache type,
/// format, layout, q dtype and head size; null when this build has none (kernel_for's kernel
/// serves those items then).
ItemFn decode_kernel_for(Isa isa, const KernelArgs& a);

}  // namespace attn::cpu_flash
