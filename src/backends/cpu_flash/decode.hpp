#pragma once
/// The decode kernel: work items of at most kDecodeMaxRows rows (one or a few query tokens × the
/// GQA group) streaming a KV range. Built per ISA; the forward routes such items here when the
/// build has a kernel for the cache type and head size, and the general kernel serves the rest.
#include "backends/cpu_flash/head_sizes.hpp"
#include "backends/cpu_flash/kernel_args.hpp"

namespace attn::cpu_flash {

inline constexpr int kDecodeMaxRows = 16;
inline constexpr int kMaxHeadSizeDecode = kMaxHeadSize;

/// Head sizes the decode kernels take: whole 32-element slices (one 64-byte line of bf16).
constexpr bool decode_head_size(int d) { return d % 32 == 0 && d <= kMaxHeadSizeDecode; }

/// Caches whose rows the decode kernel unpacks per chunk into scratch rows, then reads as a row
/// cache: nvfp4 into bf16 rows (e2m1 · block scale, exact), turboquant into fp32 key rows (rotated,
/// norm · c / |c|, or the fp8 values) and value rows (code · scale + min in fp32, or with bf16 q
/// the codes in bf16, their scale and minimum applied around the products).
enum class Unpack : uint8_t { none, nvfp4, turboquant };

#if defined(__x86_64__) || defined(_M_X64)
/// AVX-512 decode kernel for nvfp4 / turboquant caches; bf16_dot (bf16 q): vdpbf16ps for nvfp4's
/// products and turboquant's P·V.
ItemFn decode_kernel_avx512_unpacked(Unpack u, bool bf16_dot);
/// AVX-512 decode kernel for a cache type; bf16_dot: Q·Kᵀ on vdpbf16ps (bf16 q and cache only).
ItemFn decode_kernel_avx512(KvType kv, bool bf16_dot);
/// AVX-512 BF16 + VBMI decode kernel for e4m3 caches and bf16 q; head sizes multiple of 64.
ItemFn decode_kernel_avx512_e4m3_dot();
/// The same for turboquant_k8v4 caches (e4m3 keys read in place, the values unpacked as codes).
ItemFn decode_kernel_avx512_turboquant_e4m3_keys();
/// AVX-512 BF16 decode kernel for HND_PAIRS caches: bf16 q and cache.
ItemFn decode_kernel_avx512_pairs();
/// AVX-512 BF16 + VBMI decode kernel for HND_PAIRS fp8 caches (e4m3, e5m2) and bf16 q.
ItemFn decode_kernel_avx512_fp8_pairs(KvType kv);
/// AVX-512 BF16 + VBMI decode kernel for HND_PAIRS fp8_per_token_head caches and bf16 q.
ItemFn decode_kernel_avx512_token_pairs(KvType kv);
/// AVX-512 BF16 + VNNI decode kernel for HND_PAIRS int8_per_token_head caches and bf16 q.
ItemFn decode_kernel_avx512_int8_pairs();
/// AVX-512 BF16 decode kernel for HND_PAIRS int4_per_token_head caches and bf16 q.
ItemFn decode_kernel_avx512_int4_pairs();
#endif

}  // namespace attn::cpu_flash
