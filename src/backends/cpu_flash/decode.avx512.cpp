// AVX-512 (+BF16) build of the decode kernel; see decode_impl.hpp.
#define ATTN_CF_NS avx512_decode
#define ATTN_CF_VBMI 0
#include "backends/cpu_flash/decode_impl.hpp"

namespace attn::cpu_flash {

ItemFn decode_kernel_avx512(KvType kv, bool bf16_dot) {
  using namespace avx512_decode;
  switch (kv) {
    case KvType::bf16: return bf16_dot ? &run_item<KvType::bf16, true> : &run_item<KvType::bf16, false>;
    case KvType::f16: return &run_item<KvType::f16, false>;
    case KvType::f32: return &run_item<KvType::f32, false>;
    case KvType::e4m3: return &run_item<KvType::e4m3, false>;
    case KvType::e5m2: return &run_item<KvType::e5m2, false>;
    case KvType::i8: return nullptr;  // per-token-head: the pair kernel (AVX512-VNNI) or the general one
    case KvType::i4: return nullptr;  // pair caches only (decode_kernel_avx512_int4_pairs)
  }
  return nullptr;
}

ItemFn decode_kernel_avx512_unpacked(Unpack u, bool bf16_dot) {
  using namespace avx512_decode;
  if (u == Unpack::turboquant)  // bf16 q: P·V on the V codes (decode_impl.hpp), Q·Kᵀ in fp32 either way
    return bf16_dot ? &run_item<KvType::f32, true, false, false, Unpack::turboquant>
                    : &run_item<KvType::f32, false, false, false, Unpack::turboquant>;
  if (u == Unpack::nvfp4)
    return bf16_dot ? &run_item<KvType::bf16, true, false, false, Unpack::nvfp4> : &run_item<KvType::bf16, false, false, false, Unpack::nvfp4>;
  return nullptr;
}

ItemFn decode_kernel_avx512_pairs() { return &avx512_decode::run_item<KvType::bf16, true, true>; }

ItemFn decode_kernel_avx512_int4_pairs() { return &avx512_decode::run_item<KvType::i4, true, true, true>; }

ItemFn decode_kernel_avx512_int8_pairs() { return &avx512_decode::run_item<KvType::i8, true, true, true>; }

}  // namespace attn::cpu_flash
