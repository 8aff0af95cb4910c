// AVX-512 build of the MLA attend kernel: 16-wide fp32 FMAs, 16-bit cache entries widened in
// registers (bf16 by a shift, f16 by vcvtph2ps, e4m3 by cpu_flash's fp16 bit placement), e5m2
// through the scalar table.
#if defined(__x86_64__)
#include "cpu/x86_intrinsics.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "attn/numeric.hpp"
#include "kernels/gather/mla_kernel.hpp"
#define ATTN_CF_NS mla_avx512
#include "kernels/simd/simd_avx512.hpp"

namespace attn::mla {
namespace avx512 {

void convert_row(DType dtype, const uint8_t* src, float* dst, int n, float scale) {
  const __m512 vs = _mm512_set1_ps(scale);
  int i = 0;
  if (dtype == DType::bfloat16) {
    const auto* p = reinterpret_cast<const uint16_t*>(src);
    for (; i + 16 <= n; i += 16) {
      const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
      _mm512_storeu_ps(dst + i, _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(w, 16)), vs));
    }
  } else if (dtype == DType::float16) {
    const auto* p = reinterpret_cast<const uint16_t*>(src);
    for (; i + 16 <= n; i += 16) {
      _mm512_storeu_ps(dst + i, _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i))), vs));
    }
  } else if (dtype == DType::fp8_e4m3) {
    // The widening gives value × 2^-8 (exact): 256 folds back into the scale.
    using Simd = cpu_flash::ATTN_CF_NS::Simd;
    const __m512 vs8 = _mm512_mul_ps(vs, _mm512_set1_ps(256.0f));
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(dst + i, _mm512_mul_ps(Simd::load_kv<cpu_flash::KvType::e4m3>(src + i), vs8));
  } else if (dtype == DType::float32) {
    const auto* p = reinterpret_cast<const float*>(src);
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_mul_ps(_mm512_loadu_ps(p + i), vs));
  }
  for (; i < n; ++i) dst[i] = load_as_float(src, dtype, i) * scale;
}

inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

void dot4(const float* q, const float* k0, const float* k1, const float* k2, const float* k3, int n, float* out) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int d = 0;
  for (; d + 16 <= n; d += 16) {
    const __m512 vq = _mm512_loadu_ps(q + d);
    a0 = _mm512_fmadd_ps(vq, _mm512_loadu_ps(k0 + d), a0);
    a1 = _mm512_fmadd_ps(vq, _mm512_loadu_ps(k1 + d), a1);
    a2 = _mm512_fmadd_ps(vq, _mm512_loadu_ps(k2 + d), a2);
    a3 = _mm512_fmadd_ps(vq, _mm512_loadu_ps(k3 + d), a3);
  }
  if (d < n) {
    const __mmask16 m = __mmask16((1u << (n - d)) - 1u);
    const __m512 vq = _mm512_maskz_loadu_ps(m, q + d);
    a0 = _mm512_fmadd_ps(vq, _mm512_maskz_loadu_ps(m, k0 + d), a0);
    a1 = _mm512_fmadd_ps(vq, _mm512_maskz_loadu_ps(m, k1 + d), a1);
    a2 = _mm512_fmadd_ps(vq, _mm512_maskz_loadu_ps(m, k2 + d), a2);
    a3 = _mm512_fmadd_ps(vq, _mm512_maskz_loadu_ps(m, k3 + d), a3);
  }
  out[0] = hsum(a0), out[1] = hsum(a1), out[2] = hsum(a2), out[3] = hsum(a3);
}

void axpy4(float* acc, const float* p, const float* k0, const float* k1, const float* k2, const float* k3, int n) {
  const __m512 p0 = _mm512_set1_ps(p[0]), p1 = _mm512_set1_ps(p[1]), p2 = _mm512_set1_ps(p[2]),
               p3 = _mm512_set1_ps(p[3]);
  int d = 0;
  for (; d + 16 <= n; d += 16) {
    __m512 a = _mm512_loadu_ps(acc + d);
    a = _mm512_fmadd_ps(p0, _mm512_loadu_ps(k0 + d), a);
    a = _mm512_fmadd_ps(p1, _mm512_loadu_ps(k1 + d), a);
    a = _mm512_fmadd_ps(p2, _mm512_loadu_ps(k2 + d), a);
    a = _mm512_fmadd_ps(p3, _mm512_loadu_ps(k3 + d), a);
    _mm512_storeu_ps(acc + d, a);
  }
  for (; d < n; ++d) acc[d] += p[0] * k0[d] + p[1] * k1[d] + p[2] * k2[d] + p[3] * k3[d];
}

#include "kernels/gather/mla_kernel.inl"

}  // namespace avx512

AttendFn attend_avx512() { return &avx512::attend_impl; }

}  // namespace attn::mla
#endif
