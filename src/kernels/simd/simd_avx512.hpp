#pragma once
/// AVX-512 vector traits for cpu_flash's kernel (kernel_impl.hpp) and the MLA attend kernel: 16
/// fp32 lanes, 16 accumulators per micro-tile. Included only by *.avx512.cpp files, inside the
/// including file's ISA namespace.
#include "cpu/x86_intrinsics.hpp"  // GCC 12's false uninitialized warnings off

#include <cmath>
#include <cstdint>

#include "kernels/simd/kv_type.hpp"

namespace attn::cpu_flash::ATTN_CF_NS {

struct Simd {
  static constexpr int W = 16;
  static constexpr int kAcc = 16;
  using F = __m512;
  using Mask = __mmask16;

  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void storeu(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F in_register(F v) { return v; }  // as the compiler schedules it: pinning was measured on AVX2 only
  static float hmax(F v) { return _mm512_reduce_max_ps(v); }
  static float hsum(F v) { return _mm512_reduce_add_ps(v); }
  static Mask tail(int n) { return Mask((1u << n) - 1u); }

  /// W elements of one KV row as fp32 (e4m3 without its 2^8, see kE4m3Rebias).
  template <KvType T>
  static F load_kv(const void* p) {
    if constexpr (T == KvType::f32) return _mm512_loadu_ps(p);
    if constexpr (T == KvType::f16) return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
    if constexpr (T == KvType::bf16)
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(static_cast<const __m256i*>(p))), 16));
    if constexpr (T == KvType::e4m3) return e4m3(_mm256_cvtepu8_epi16(_mm_loadu_si128(static_cast<const __m128i*>(p))));
    if constexpr (T == KvType::e5m2)
      return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128(static_cast<const __m128i*>(p))), 8));
    if constexpr (T == KvType::i8) return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p))));
  }
  /// The first `n` < W elements; the rest are 0 and nothing past the row is read.
  template <KvType T>
  static F load_kv_tail(const void* p, int n) {
    const Mask m = tail(n);
    if constexpr (T == KvType::f32) return _mm512_maskz_loadu_ps(m, p);
    if constexpr (T == KvType::f16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
    if constexpr (T == KvType::bf16)
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
    if constexpr (T == KvType::e4m3) return e4m3(_mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(m, p)));
    if constexpr (T == KvType::e5m2)
      return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(m, p)), 8));
    if constexpr (T == KvType::i8) return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, p)));
  }
  /// 16 e4m3 bytes (zero-extended to 16 bits) as fp32 × 2^-8, via their fp16 bit placement.
  static F e4m3(__m256i x) {
    const __m256i s = _mm256_slli_epi16(_mm256_and_si256(x, _mm256_set1_epi16(0x80)), 8);
    const __m256i m7 = _mm256_and_si256(x, _mm256_set1_epi16(0x7f));
    const __m256i nan = _mm256_and_si256(_mm256_cmpeq_epi16(m7, _mm256_set1_epi16(0x7f)), _mm256_set1_epi16(0x7e00));  // NaN code
    return _mm512_cvtph_ps(_mm256_or_si256(_mm256_or_si256(s, _mm256_slli_epi16(m7, 7)), nan));
  }

  /// exp(x), 0 for x = -inf, NaN for NaN (a NaN score must not become a finite weight). Cephes
  /// polynomial on the reduced argument; vscalefps applies 2^n without overflow tricks.
  static F exp(F x) {
    const Mask nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    const F x0 = x;
    const Mask live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(88.72f));
    const F n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    F r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    F p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_mask_mov_ps(_mm512_maskz_mov_ps(live, _mm512_scalef_ps(p, n)), nan, x0);
  }

  /// Sums of 16 vectors into one: out[i] = sum(acc[i]). A transpose-add tree, 3 ops per sum
  /// instead of a full horizontal reduction each.
  static void reduce(const F* acc, float* out) {
    F x[8], y[4], z[2];
    for (int i = 0; i < 8; ++i)
      x[i] = _mm512_add_ps(_mm512_unpacklo_ps(acc[2 * i], acc[2 * i + 1]), _mm512_unpackhi_ps(acc[2 * i], acc[2 * i + 1]));
    for (int i = 0; i < 4; ++i) {
      const __m512d a = _mm512_castps_pd(x[2 * i]), b = _mm512_castps_pd(x[2 * i + 1]);
      y[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    for (int i = 0; i < 2; ++i)
      z[i] = _mm512_add_ps(_mm512_shuffle_f32x4(y[2 * i], y[2 * i + 1], 0x88), _mm512_shuffle_f32x4(y[2 * i], y[2 * i + 1], 0xdd));
    _mm512_storeu_ps(out, _mm512_add_ps(_mm512_shuffle_f32x4(z[0], z[1], 0x88), _mm512_shuffle_f32x4(z[0], z[1], 0xdd)));
  }
};

}  // namespace attn::cpu_flash::ATTN_CF_NS
