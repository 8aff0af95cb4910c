#pragma once
/// The int4 / turboquant Hadamard transform on vectors: the same butterflies in the same stage
/// order as int4_head::hadamard (bit-identical results), 16 lanes at a time. Stages of span 1, 2,
/// 4 and 8 pair lanes inside one vector (a lane permute, an add, a masked subtract); wider spans
/// pair whole vectors. The kernels rotate every q row and unrotate every int4 output row, which
/// the scalar butterflies made a sizeable share of an int4 prefill. Compiled per ISA inside the
/// including file's namespace (ATTN_CF_NS).
#include <cstdint>

#include "attn/kv_formats.hpp"

#if defined(__AVX512F__)
#include "cpu/x86_intrinsics.hpp"
#endif

namespace attn::cpu_flash::ATTN_CF_NS {

inline void hadamard_simd(float* x, int32_t n) {
#if defined(__AVX512F__)
  if (n >= 16 && n % 16 == 0) {
    for (int32_t i = 0; i < n; i += 16) {
      __m512 v = _mm512_loadu_ps(x + i), p;
      // Lanes with the span's bit set take a − b (partner minus self), the others a + b.
      p = _mm512_permute_ps(v, 0xB1), v = _mm512_mask_sub_ps(_mm512_add_ps(v, p), 0xAAAA, p, v);
      p = _mm512_permute_ps(v, 0x4E), v = _mm512_mask_sub_ps(_mm512_add_ps(v, p), 0xCCCC, p, v);
      p = _mm512_shuffle_f32x4(v, v, 0xB1), v = _mm512_mask_sub_ps(_mm512_add_ps(v, p), 0xF0F0, p, v);
      p = _mm512_shuffle_f32x4(v, v, 0x4E), v = _mm512_mask_sub_ps(_mm512_add_ps(v, p), 0xFF00, p, v);
      _mm512_storeu_ps(x + i, v);
    }
    for (int32_t h = 16; h < n; h <<= 1)
      for (int32_t i = 0; i < n; i += 2 * h)
        for (int32_t j = i; j < i + h; j += 16) {
          const __m512 a = _mm512_loadu_ps(x + j), b = _mm512_loadu_ps(x + j + h);
          _mm512_storeu_ps(x + j, _mm512_add_ps(a, b)), _mm512_storeu_ps(x + j + h, _mm512_sub_ps(a, b));
        }
    return;
  }
#endif
  int4_head::hadamard(x, n);
}

}  // namespace attn::cpu_flash::ATTN_CF_NS
