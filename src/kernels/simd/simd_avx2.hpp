#pragma once
/// AVX2+FMA vector traits for cpu_flash's kernel (kernel_impl.hpp): 8 fp32 lanes, 8 accumulators
/// per micro-tile (16 ymm registers in all). A head size that is not a multiple of 8 ends in a
/// tail vector.
#include "cpu/x86_intrinsics.hpp"

#include <cmath>
#include <cstdint>

#include "kernels/simd/kv_type.hpp"

namespace attn::cpu_flash::ATTN_CF_NS {

struct Simd {
  static constexpr int W = 8;
  static constexpr int kAcc = 8;
  using F = __m256;

  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void storeu(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  /// v, kept in a register: GCC otherwise folds a vector used by several FMAs into each of them
  /// as a memory operand, one load per use, and the micro-tiles here are bound by loads (on Zen 3
  /// Q·Kᵀ's 4×2 tile took 10 loads per 8 FMAs that way instead of 6).
  static F in_register(F v) {
    __asm__("" : "+x"(v));
    return v;
  }
  static float hsum(F v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
  static float hmax(F v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
  }

  /// W stored elements (the low 16 bytes of `raw` for 16-bit types, the low 8 for fp8) as fp32
  /// (e4m3 without its 2^8, see kE4m3Rebias).
  template <KvType T>
  static F widen(__m128i raw) {
    if constexpr (T == KvType::f16) return _mm256_cvtph_ps(raw);
    if constexpr (T == KvType::bf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
    if constexpr (T == KvType::e4m3) {  // fp16 bit placement, × 2^-8 (see kE4m3Rebias)
      const __m128i x = _mm_cvtepu8_epi16(raw);
      const __m128i s = _mm_slli_epi16(_mm_and_si128(x, _mm_set1_epi16(0x80)), 8);
      const __m128i m7 = _mm_and_si128(x, _mm_set1_epi16(0x7f));
      const __m128i nan = _mm_and_si128(_mm_cmpeq_epi16(m7, _mm_set1_epi16(0x7f)), _mm_set1_epi16(0x7e00));  // NaN code
      return _mm256_cvtph_ps(_mm_or_si128(_mm_or_si128(s, _mm_slli_epi16(m7, 7)), nan));
    }
    if constexpr (T == KvType::e5m2) return _mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(raw), 8));
    if constexpr (T == KvType::i8) return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(raw));
  }

  template <KvType T>
  static F load_kv(const void* p) {
    const __m128i* q = static_cast<const __m128i*>(p);
    if constexpr (T == KvType::f32) return _mm256_loadu_ps(static_cast<const float*>(p));
    else if constexpr (kv_bytes<T>() == 2) return widen<T>(_mm_loadu_si128(q));
    else return widen<T>(_mm_loadl_epi64(q));
  }
  /// The first `n` < W elements; the rest are 0 and nothing past the row is read: the whole
  /// 32-bit words by a masked load (vpmaskmovd never touches masked-out memory), the bytes of a
  /// last partial word one by one.
  template <KvType T>
  static F load_kv_tail(const void* p, int n) {
    const __m128i lane = _mm_setr_epi32(0, 1, 2, 3);
    if constexpr (T == KvType::f32) {
      const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      return _mm256_maskload_ps(static_cast<const float*>(p), m);
    } else {
      const int bytes = n * kv_bytes<T>(), words = bytes / 4;
      __m128i raw = _mm_maskload_epi32(static_cast<const int*>(p), _mm_cmpgt_epi32(_mm_set1_epi32(words), lane));
      if (bytes % 4) {
        const unsigned char* b = static_cast<const unsigned char*>(p) + 4 * words;
        uint32_t last = 0;
        for (int i = 0; i < bytes % 4; ++i) last |= uint32_t(b[i]) << (8 * i);
        raw = _mm_or_si128(raw, _mm_and_si128(_mm_set1_epi32(int(last)), _mm_cmpeq_epi32(_mm_set1_epi32(words), lane)));
      }
      return widen<T>(raw);
    }
  }

  /// exp(x), 0 for x = -inf, NaN for NaN (a NaN score must not become a finite weight). Cephes
  /// polynomial; 2^n built in the exponent field (x clamped so n stays a normal exponent).
  static F exp(F x) {
    const F nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q), x0 = x;
    const F live = _mm256_cmp_ps(x, _mm256_set1_ps(-INFINITY), _CMP_NEQ_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    const F n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    F r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    F p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_blendv_ps(_mm256_and_ps(live, _mm256_mul_ps(p, _mm256_castsi256_ps(e))), x0, nan);
  }

  /// out[i] = sum(acc[i]) for 8 vectors: a horizontal-add tree.
  static void reduce(const F* acc, float* out) {
    const F h01 = _mm256_hadd_ps(acc[0], acc[1]), h23 = _mm256_hadd_ps(acc[2], acc[3]);
    const F h45 = _mm256_hadd_ps(acc[4], acc[5]), h67 = _mm256_hadd_ps(acc[6], acc[7]);
    const F a = _mm256_hadd_ps(h01, h23), b = _mm256_hadd_ps(h45, h67);
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31)));
  }
};

}  // namespace attn::cpu_flash::ATTN_CF_NS
