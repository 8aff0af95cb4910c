// Part of one store build (store_run_impl.hpp): a row of the caller's values into its storage
// dtype (converted, or quantized per token-head with its scale), 16 lanes at a time on AVX-512
// builds. Included once per ISA translation unit, inside its anonymous namespace.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "attn/limits.hpp"
#include "attn/numeric.hpp"
#include "attn/tensor.hpp"
#include "kv/store_run.hpp"

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include "cpu/x86_intrinsics.hpp"
#define ATTN_STORE_AVX512 1
#else
#define ATTN_STORE_AVX512 0
#endif

namespace attn::kv {
namespace {


bool fp8(DType d) { return d == DType::fp8_e4m3 || d == DType::fp8_e5m2; }

// Values fp8 storage cannot hold: NaN, ±inf, and finite values beyond ±max (stored clamped).
int64_t count_unrepresentable(const float* v, int32_t n, float max) {
  int64_t c = 0;
  for (int32_t i = 0; i < n; ++i) c += !(std::fabs(v[i]) <= max);
  return c;
}

#if ATTN_STORE_AVX512
// One whole 64-byte line. `stream`: past the caches (bulk writes; no read for ownership of a line
// that is overwritten whole); the line must be 64-byte aligned for that, else it is stored.
inline void store_line(char* dst, __m512i x, bool stream) {
  if (stream && (reinterpret_cast<std::uintptr_t>(dst) & 63) == 0) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst), x);
  } else {
    _mm512_storeu_si512(dst, x);
  }
}

// Round-to-nearest-even f32 → bf16 on 16 lanes, NaN kept quiet (f32_to_bf16's rule).
inline __m256i f32x16_to_bf16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}
#endif

#if ATTN_STORE_AVX512
// 16 floats to e4m3 bytes, as f32_to_fp8_e4m3 rounds them (nearest even, saturating at ±448, NaN
// to the NaN code, the sign kept for zeros): normals round at mantissa bit 20 of the fp32 bits and
// rebias the exponent (the carry of a rounding up moves into it), values below 2^-6 are multiples of
// 2^-9 (code = round(|x| · 512); 8 is the smallest normal's code, which is what rounding up gives).
inline __m128i f32x16_to_e4m3(__m512 x) {
  const __m512i u = _mm512_castps_si512(x), mag = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(mag, 20), _mm512_set1_epi32(1));
  const __m512i normal = _mm512_sub_epi32(_mm512_srli_epi32(_mm512_add_epi32(mag, _mm512_add_epi32(_mm512_set1_epi32(0x7ffff), lsb)), 20),
                                          _mm512_set1_epi32(120 << 3));
  const __m512 a = _mm512_castsi512_ps(mag);
  const __m512i sub = _mm512_cvt_roundps_epi32(_mm512_mul_ps(a, _mm512_set1_ps(512.0f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512i code = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(a, _mm512_set1_ps(0.015625f), _CMP_LT_OQ), normal, sub);
  code = _mm512_min_epi32(code, _mm512_set1_epi32(0x7e));  // also catches ±inf and the huge (their `normal` is large)
  code = _mm512_mask_mov_epi32(code, _mm512_cmpgt_epu32_mask(mag, _mm512_set1_epi32(0x7f800000)), _mm512_set1_epi32(0x7f));  // NaN
  code = _mm512_or_si512(code, _mm512_and_si512(_mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80)));
  return _mm512_cvtepi32_epi8(code);
}
#endif

// One row of n values from the caller's dtype into storage dtype `dd` (fp8: times inv_scale).
int64_t convert_row(const char* src, DType sd, char* dst, DType dd, int32_t n, float inv_scale, bool stream = false) {
  if (sd == dd && !fp8(dd)) {
    const std::size_t bytes = std::size_t(n) * dtype_size(dd);
#if ATTN_STORE_AVX512
    if (stream && bytes % 64 == 0 && (reinterpret_cast<std::uintptr_t>(dst) & 63) == 0) {
      for (std::size_t b = 0; b < bytes; b += 64) store_line(dst + b, _mm512_loadu_si512(src + b), true);
      return 0;
    }
#endif
    std::memcpy(dst, src, bytes);
    return 0;
  }
  int32_t i = 0;
#if ATTN_STORE_AVX512
  if (sd == DType::float32 && dd == DType::bfloat16) {
    for (; i + 16 <= n; i += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 2 * i), f32x16_to_bf16(_mm512_loadu_ps(reinterpret_cast<const float*>(src) + i)));
  } else if (sd == DType::bfloat16 && dd == DType::float32) {
    for (; i + 16 <= n; i += 16) {
      const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * i)));
      _mm512_storeu_si512(dst + 4 * i, _mm512_slli_epi32(w, 16));
    }
  }
#endif
  if (!fp8(dd)) {
    for (; i < n; ++i) store_from_float(dst, dd, i, load_as_float(src, sd, i));
    return 0;
  }
  // fp8: scaled in chunks so the count of unrepresentable values reads the scaled floats once.
  const float max = dd == DType::fp8_e4m3 ? kFp8E4M3Max : kFp8E5M2Max;
  int64_t bad = 0;
  alignas(64) float scaled[64];
  for (; i < n; i += 64) {
    const int32_t m = std::min(64, n - i);
    for (int32_t j = 0; j < m; ++j) scaled[j] = load_as_float(src, sd, i + j) * inv_scale;
    bad += count_unrepresentable(scaled, m, max);
    int32_t j = 0;
#if ATTN_STORE_AVX512
    if (dd == DType::fp8_e4m3)
      for (; j + 16 <= m; j += 16) _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i + j), f32x16_to_e4m3(_mm512_load_ps(scaled + j)));
#endif
    for (; j < m; ++j) store_from_float(dst, dd, i + j, scaled[j]);
  }
  return bad;
}

// Per-token-head caches: one (slot, head) vector quantized with its own scale (token_head), the
// scale written to *scale. Returns the non-finite values it held.
int64_t quantize_row(const char* src, DType sd, char* dst, DType dd, int32_t n, float* scale) {
#if ATTN_STORE_AVX512
  // int8 / e4m3 from fp32 / bf16 / fp16 rows in registers: the same operations as
  // token_head::quantize in the same order (absmax, one division, x · (1 / scale), then half away
  // from zero and truncation, or f32x16_to_e4m3), so both give the same bytes; a vector with a
  // NaN or an infinity takes the scalar form.
  if ((dd == DType::int8 || dd == DType::fp8_e4m3) && (sd == DType::float32 || sd == DType::bfloat16 || sd == DType::float16)) {
    auto load = [&](int32_t i, __mmask16 m) -> __m512 {
      if (sd == DType::float32) return _mm512_maskz_loadu_ps(m, src + 4 * std::size_t(i));
      const __m256i h = _mm256_maskz_loadu_epi16(m, src + 2 * std::size_t(i));
      if (sd == DType::float16) return _mm512_cvtph_ps(h);
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    };
    auto mask = [&](int32_t i) { return n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1u); };
    __m512 amax = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (int32_t i = 0; i < n; i += 16) {
      const __m512 x = load(i, mask(i));
      const __m512i e = _mm512_set1_epi32(0x7f800000);  // all exponent bits: NaN or ±Inf
      bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(x), e), e);
      amax = _mm512_max_ps(amax, _mm512_abs_ps(x));
    }
    if (!bad) {
      const float sc = std::max(_mm512_reduce_max_ps(amax) / token_head::max_code(dd), token_head::kMinScale);
      const __m512 inv = _mm512_set1_ps(1.0f / sc), half = _mm512_set1_ps(0.5f);
      for (int32_t i = 0; i < n; i += 16) {
        const __mmask16 m = mask(i);
        const __m512 q = _mm512_mul_ps(load(i, m), inv);
        if (dd == DType::fp8_e4m3) {
          _mm_mask_storeu_epi8(dst + i, m, f32x16_to_e4m3(q));
          continue;
        }
        // q + 0.5 for q >= 0 (-0 included), q - 0.5 below
        const __m512 r = _mm512_mask_sub_ps(_mm512_add_ps(q, half), _mm512_cmp_ps_mask(q, _mm512_setzero_ps(), _CMP_LT_OQ), q, half);
        _mm512_mask_cvtsepi32_storeu_epi8(dst + i, m, _mm512_cvttps_epi32(r));
      }
      *scale = sc;
      return 0;
    }
  }
#endif
  float row[limits::kMaxHeadSize];
  for (int32_t i = 0; i < n; ++i) row[i] = load_as_float(src, sd, i);
  int64_t bad = 0;
  *scale = token_head::quantize(row, n, dd, dst, &bad);
  return bad;
}

// int4_per_token_head: one vector rotated in fp32 and rounded back to the written dtype (vLLM's
// single_rht(x.float()).to(x.dtype)), then quantized into n / 2 bytes with its scale and zero
// point. A vector holding a NaN or an infinity is counted before the rotation spreads it.
int64_t quantize_int4_row(const char* src, DType sd, uint8_t* dst, int32_t n, float* scale) {
  alignas(64) float y[limits::kMaxHeadSize];
  int64_t bad = 0;
  for (int32_t i = 0; i < n; ++i) bad += !std::isfinite(y[i] = load_as_float(src, sd, i));
  if (bad) {
    std::memset(dst, 0, std::size_t(n / 2));
    *scale = std::numeric_limits<float>::quiet_NaN();
    return bad;
  }
  int4_head::rotate_query(y, n, sd);  // the same rotation and rounding as a query's
  *scale = int4_head::quantize(y, n, dst, &bad);
  return bad;
}

// Where slot t's scale for `head` goes in a per-token-head cache; null for other caches.
float* token_scale_slot(const PagedKV& pv, bool is_v, int64_t block, int64_t t, int32_t head) {
  float* s = is_v ? pv.v_token_scales : pv.k_token_scales;
  return s ? s + token_scale_index(pv, block, t, head) : nullptr;
}

// One row into storage: converted (scaled by inv_scale for fp8), or quantized with its own scale.
int64_t write_row(const char* src, DType sd, char* dst, DType dd, int32_t n, float inv_scale, float* token_scale, bool stream = false) {
  return token_scale ? quantize_row(src, sd, dst, dd, n, token_scale) : convert_row(src, sd, dst, dd, n, inv_scale, stream);
}

}  // namespace
}  // namespace attn::kv
