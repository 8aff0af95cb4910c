// AVX-512 + BF16 + VBMI build of the decode kernel: e4m3 caches through byte-table lookups
// into bf16, then vdpbf16ps for both products; see decode_impl.hpp.
#define ATTN_CF_NS avx512vbmi_decode
#define ATTN_CF_VBMI 1
#include "backends/cpu_flash/decode_impl.hpp"

namespace attn::cpu_flash {

ItemFn decode_kernel_avx512_e4m3_dot() { return &avx512vbmi_decode::run_item<KvType::e4m3, true>; }

ItemFn decode_kernel_avx512_turboquant_e4m3_keys() {
  return &avx512vbmi_decode::run_item<KvType::e4m3, true, false, false, Unpack::turboquant>;
}

ItemFn decode_kernel_avx512_fp8_pairs(KvType kv) {
  using namespace avx512vbmi_decode;
  return kv == KvType::e4m3 ? &run_item<KvType::e4m3, true, true> : kv == KvType::e5m2 ? &run_item<KvType::e5m2, true, true> : nullptr;
}

ItemFn decode_kernel_avx512_token_pairs(KvType kv) {
  using namespace avx512vbmi_decode;
  return kv == KvType::e4m3 ? &run_item<KvType::e4m3, true, true, true> : nullptr;
}

}  // namespace attn::cpu_flash
