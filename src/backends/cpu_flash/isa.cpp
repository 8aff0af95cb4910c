#include "backends/cpu_flash/isa.hpp"

#include "attn/error.hpp"
#include "attn/types.hpp"
#include "backends/cpu_flash/decode.hpp"
#include "backends/cpu_flash/prefill.hpp"


namespace attn::cpu_flash {
namespace {
// The kernel builds this family has (best first in isa_variants). amx is avx512_bf16 with the
// prefill tiles' products on AMX.
constexpr std::initializer_list<Isa> kBuilds = {Isa::amx, Isa::avx512_bf16, Isa::avx512, Isa::avx2, Isa::generic};
}  // namespace

Isa best_isa(const Platform& p) { return cpu::best_of(p, kBuilds); }

Isa chosen_isa(const Platform& p) { return cpu::choose(p, kBuilds); }

Isa tile_isa(Isa isa, bool named) {
#if defined(__x86_64__) || defined(_M_X64)
  // The prefill tiles are compute-bound: where bf16 dot products run slower than fp32 FMA per
  // FLOP (measured on this CPU, once: Intel Sapphire / Emerald Rapids do half the FMA rate), the
  // tiles take fp32. Decode stays on bf16 dot products there: it is bound by the bytes it reads,
  // which the bf16 pair cache halves. A build named by the caller or ATTN_CPU_ISA is run as named.
  if (isa == Isa::avx512_bf16 && !named && !cpu::forced_isa() && !prefill::bf16_dot_beats_fma()) return Isa::avx512;
#else
  (void)named;
#endif
  return isa;
}

Isa layer_isa(Isa isa, const LayerConfig& c) {
  if (isa < Isa::avx512_bf16) return isa;
  // AMX serves the bf16 prefill tiles of head sizes in whole 64-byte tile rows (ALiBi layers
  // never take the tiles); the rest of such a layer runs the avx512_bf16 kernels.
  if (isa == Isa::amx) {
    const Isa below = layer_isa(Isa::avx512_bf16, c);
    return below == Isa::avx512_bf16 && c.head_size % 32 == 0 && !c.use_alibi ? Isa::amx : below;
  }
  if (c.dtype != DType::bfloat16) return Isa::avx512;
  if (c.kv_cache_dtype == KVCacheDType::int4_per_token_head || is_nvfp4(c.kv_cache_dtype)) return isa;  // bf16 rows
  if (is_turboquant(c.kv_cache_dtype)) return isa;  // bf16 prefill tiles; decode reads fp32 rows on any build
  const DType s = kv_storage_dtype(c.kv_cache_dtype, c.dtype);
  if (s == DType::bfloat16) return isa;
  const bool codes = s == DType::fp8_e4m3 || s == DType::fp8_e5m2 || s == DType::int8;  // bf16 tiles and pair kernels
  return codes && c.head_size % 2 == 0 ? isa : Isa::avx512;
}

std::vector<std::string> isa_variants(const Platform& p) {
  std::vector<std::string> out;
  for (Isa isa : kBuilds)
    if (isa <= best_isa(p)) out.emplace_back(to_string(isa));
  return out;
}

Isa isa_for_variant(const std::string& variant, const Platform& p) {
  if (variant.empty()) return chosen_isa(p);
  for (Isa isa : kBuilds)
    if (to_string(isa) == variant && isa <= best_isa(p)) return isa;
  throw Error("variant='" + variant + "' invalid for cpu_flash on this CPU: expected one of " + join(isa_variants(p)));
}

ItemFn kernel_for(Isa isa, KvType kv, DType q) {
  const int k = int(kv);
#if defined(__x86_64__) || defined(_M_X64)
  if (isa >= Isa::avx512_bf16 && q == DType::bfloat16 && kernels_avx512_bf16().by_kv[k]) return kernels_avx512_bf16().by_kv[k];
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
bool has_vnni() {
  static const bool yes = detect_cpu().has(CpuFeature::avx512_vnni);
  return yes;
}
}  // namespace

ItemFn decode_kernel_for(Isa isa, const KernelArgs& a) {
#if defined(__x86_64__) || defined(_M_X64)
  const KvType kv = a.kv_type;
  const int head_size = a.head_size;
  const KVLayout layout = a.kv.layout;
  const bool bf16_dot = isa >= Isa::avx512_bf16 && a.q_dtype == DType::bfloat16;
  const bool token_scales = a.kv.k_token_scales != nullptr, int4 = a.int4;
  // turboquant_k8v4 with bf16 q: its e4m3 keys read in place by the VBMI byte-table dot products
  // (as an e4m3 row cache's: head sizes of 64s), its values unpacked.
  if (a.turboquant && a.kv.tq.key_fp8() && bf16_dot && head_size % 64 == 0 && decode_head_size(head_size) &&
      a.head_size_v == head_size && has_vbmi())
    return decode_kernel_avx512_turboquant_e4m3_keys();
  // nvfp4 rows and turboquant slots: unpacked per chunk into scratch rows (exact bf16, or fp32).
  if (a.kv.nvfp4 || a.turboquant)
    return isa >= Isa::avx512 && decode_head_size(head_size) && a.head_size_v == head_size
               ? decode_kernel_avx512_unpacked(a.turboquant ? Unpack::turboquant : Unpack::nvfp4, bf16_dot)
               : nullptr;
  // int4 caches: the pair kernel on HND_PAIRS (AVX-512 BF16 and VNNI), else the general kernel.
  if (int4) return layout == KVLayout::HND_PAIRS && bf16_dot && decode_head_size(head_size) && has_vnni() ? decode_kernel_avx512_int4_pairs() : nullptr;
  // Per-token-head caches: the pair kernel that reads each key's scales (int8 codes on integer
  // dot products, e4m3 through the VBMI byte tables), else the general kernel.
  if (token_scales) {
    if (layout != KVLayout::HND_PAIRS || !bf16_dot || !decode_head_size(head_size)) return nullptr;
    if (kv == KvType::i8) return has_vnni() ? decode_kernel_avx512_int8_pairs() : nullptr;
    return has_vbmi() ? decode_kernel_avx512_token_pairs(kv) : nullptr;
  }
  // HND_PAIRS: the pair kernels, or the general kernel (which gathers rows) where they do not serve.
  if (layout == KVLayout::HND_PAIRS) {
    if (!bf16_dot || !decode_head_size(head_size)) return nullptr;
    if (kv == KvType::bf16) return decode_kernel_avx512_pairs();
    return (kv == KvType::e4m3 || kv == KvType::e5m2) && has_vbmi() ? decode_kernel_avx512_fp8_pairs(kv) : nullptr;
  }
  if (bf16_dot && kv == KvType::e4m3 && head_size % 64 == 0 && decode_head_size(head_size) && has_vbmi())
    return decode_kernel_avx512_e4m3_dot();
  if (isa >= Isa::avx512 && decode_head_size(head_size)) return decode_kernel_avx512(kv, bf16_dot && kv == KvType::bf16);
#else
  (void)isa, (void)a;
#endif
  return nullptr;
}

}  // namespace attn::cpu_flash
