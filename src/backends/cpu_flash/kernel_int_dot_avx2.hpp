#pragma once
/// AVX2 Q·Kᵀ and P·V on int16 dot products (vpmaddwd) for int8 caches and int4 ones unpacked to
/// int8 code − zero point, a policy of the general kernel (kernel_impl.hpp, IntDot). Widening the
/// codes to fp32 for FMAs left these caches no faster than bf16 on AVX2: the kernel is bound by the
/// core there, not by DRAM, and one vpmaddwd does 16 products where an FMA does 8 (each still
/// needs a vpaddd to accumulate: no AVX-VNNI). Numerics as the AVX-512 integer decode
/// kernel (decode_int_dot.hpp): q quantized per row to int16 (scale max|q| / 32767, finer than
/// bf16), P·V's weights P · (V scale) per row and chunk to int16 (scale max|w| / 32767), int32
/// sums exact. Ranges: |q| ≤ 32767, |code| ≤ 128, 256 dims: 2^30; a chunk's P·V, 32 keys: 2^27.
/// Included by kernel.avx2.cpp after kernel_impl.hpp.
#include <algorithm>
#include <cfloat>
#include <cstring>
#include <limits>

namespace attn::cpu_flash::avx2 {

struct QkInt16 {
  static constexpr bool kNeedsBf16 = false;
  static constexpr bool kIntDot = true;
  static constexpr float kInt16Max = 32767.0f;

  /// What this policy serves: 16-bit q (fp32 q is exact in the reference, and its int16 rounding
  /// would not be); head sizes of whole 16-element steps within the int32 range above.
  static bool serves(const KernelArgs& a) {
    const int d = a.head_size, dv = a.head_size_v;
    return a.q_dtype != DType::float32 && d % 16 == 0 && dv % 16 == 0 && d <= 256 && dv <= 256;
  }

  static __m256i in_register(__m256i v) {
    __asm__("" : "+x"(v));
    return v;
  }
  /// acc + the pairwise int16 products of a and b (vpmaddwd, vpaddd). Written out because GCC 12
  /// copied each accumulator of the intrinsic form per use and spilled some to the stack.
  static __m256i madd_add(__m256i acc, __m256i a, __m256i b) {
    __m256i t;
    __asm__("vpmaddwd %[b], %[a], %[t]\n\tvpaddd %[t], %[acc], %[acc]" : [acc] "+x"(acc), [t] "=&x"(t) : [a] "x"(a), [b] "x"(b));
    return acc;
  }

  /// n values of x (n a multiple of 16) as int16 into dst; returns what one unit stands for:
  /// max|x| / 32767, 0 for an all-zero row, NaN when x holds NaN or infinity (all it multiplies
  /// then turns NaN, as the same value would in the reference).
  static float quantize(const float* x, int n, int16_t* dst) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 mx = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) {
      const __m256 v = _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask);
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, _mm256_set1_ps(FLT_MAX), _CMP_NLE_UQ));  // inf or NaN
      mx = _mm256_max_ps(mx, v);
    }
    const bool finite = _mm256_movemask_ps(bad) == 0;
    const float m = Simd::hmax(mx);
    if (!finite || m == 0.0f) {
      std::fill(dst, dst + n, int16_t(0));
      return finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
    }
    const __m256 f = _mm256_set1_ps(kInt16Max / m);
    for (int i = 0; i < n; i += 16) {
      const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), f));
      const __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8), f));
      // packs works per 128-bit lane; the qword permute puts the 16 values back in order.
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8));
    }
    return m / kInt16Max;
  }

  /// The item's q rows (fp32, rp rows of ld) as int16 rows and their scales, into the tile.
  static void quantize_q(ItemScratch& sc, int rp, int d, QTile& q) {
    sc.qi.assign(std::size_t(rp) * q.ld, int16_t(0));
    sc.iscale.resize(std::size_t(rp) * 2);
    for (int r = 0; r < rp; ++r) sc.iscale[r] = quantize(q.f + int64_t(r) * q.ld, d, sc.qi.data() + int64_t(r) * q.ld);
    q.i = sc.qi.data(), q.iscale = sc.iscale.data();
  }

  /// Scores of rows [r0, r0 + RB) against KB keys: one vpmaddwd per 16 dims of a row and a key.
  template <class S, KvType T, int RB, int KB>
  static void block(const QTile& q, int r0, const void* const* k, int d, float* s, int lds) {
    static_assert(T == KvType::i8 && RB * KB == 8, "int8 rows, one 8-accumulator tile");
    __m256i acc[RB * KB];
    for (auto& a : acc) a = _mm256_setzero_si256();
    for (int x = 0; x < d; x += 16) {
      __m256i kv[KB];
      for (int j = 0; j < KB; ++j)
        kv[j] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const char*>(k[j]) + x)));
      for (int i = 0; i < RB; ++i) {
        const __m256i qv = in_register(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.i + int64_t(r0 + i) * q.ld + x)));
        for (int j = 0; j < KB; ++j) acc[i * KB + j] = madd_add(acc[i * KB + j], qv, kv[j]);
      }
    }
    const __m256i h01 = _mm256_hadd_epi32(acc[0], acc[1]), h23 = _mm256_hadd_epi32(acc[2], acc[3]);
    const __m256i h45 = _mm256_hadd_epi32(acc[4], acc[5]), h67 = _mm256_hadd_epi32(acc[6], acc[7]);
    const __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
    const __m256i sum = _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
    // Lane i·KB + j holds row i's score of key j: times the row's q scale, stored KB per row.
    alignas(32) float rs[8];
    for (int l = 0; l < 8; ++l) rs[l] = q.iscale[r0 + l / KB];
    alignas(32) float sums[8];
    _mm256_store_ps(sums, _mm256_mul_ps(_mm256_cvtepi32_ps(sum), _mm256_load_ps(rs)));
    for (int i = 0; i < RB; ++i) std::memcpy(s + i * lds, sums + i * KB, sizeof(float) * KB);
  }

  /// O[rows of rp] = O·alpha + P·V over the chunk's n keys (v holds round_up(n, 2) rows, the
  /// last repeated). Each row's kChunk weights (0 on masked keys and past n: int8 codes are
  /// finite, so no key needs a skip) become int16; a key pair's two weights, broadcast as one
  /// dword, meet the pair's codes interleaved per dim, 16 dims per tile column.
  template <KvType T, int RB>
  static void pv(ItemScratch& sc, float* o, int ldo, const float* alpha, const float* p, int ldp, const void* const* v, int n,
                 int rp, int dv) {
    static_assert(T == KvType::i8, "int8 rows");
    sc.wi.resize(std::size_t(rp) * kChunk);
    float* wscale = sc.iscale.data() + rp;
    for (int r = 0; r < rp; ++r) wscale[r] = quantize(p + int64_t(r) * ldp, kChunk, sc.wi.data() + int64_t(r) * kChunk);
    const int npairs = (n + 1) / 2;
    for (int r0 = 0; r0 < rp; r0 += RB)
      for (int x0 = 0; x0 < dv; x0 += 16) {
        __m256i acc[RB][2];
        for (auto& a : acc) a[0] = a[1] = _mm256_setzero_si256();
        for (int t = 0; t < npairs; ++t) {
          const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const char*>(v[2 * t]) + x0));
          const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const char*>(v[2 * t + 1]) + x0));
          const __m256i pair_lo = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a, b));  // dims x0 .. x0+8: (key a, key b) words
          const __m256i pair_hi = _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(a, b));
          for (int i = 0; i < RB; ++i) {
            int32_t wp;
            std::memcpy(&wp, sc.wi.data() + int64_t(r0 + i) * kChunk + 2 * t, 4);
            const __m256i wv = _mm256_set1_epi32(wp);
            acc[i][0] = madd_add(acc[i][0], wv, pair_lo);
            acc[i][1] = madd_add(acc[i][1], wv, pair_hi);
          }
        }
        for (int i = 0; i < RB; ++i) {
          const __m256 al = _mm256_set1_ps(alpha[r0 + i]), ws = _mm256_set1_ps(wscale[r0 + i]);
          for (int h = 0; h < 2; ++h) {
            float* out = o + int64_t(r0 + i) * ldo + x0 + 8 * h;
            _mm256_storeu_ps(out, _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i][h]), ws, _mm256_mul_ps(_mm256_loadu_ps(out), al)));
          }
        }
      }
  }
};

/// int8 rows: integer dot products where QkInt16 serves, fp32 FMAs otherwise.
inline void run_item_i8(const KernelArgs& a, const WorkItem& it, float* partials) {
  if (QkInt16::serves(a))
    run_item<Simd, KvType::i8, QkInt16>(a, it, partials);
  else
    run_item<Simd, KvType::i8, QkF32>(a, it, partials);
}

/// bf16 rows: fp32 FMAs, except int4 caches, unpacked to int8 rows of code − z for integer dot
/// products where QkInt16 serves.
inline void run_item_bf16(const KernelArgs& a, const WorkItem& it, float* partials) {
  if (a.int4 && QkInt16::serves(a))
    run_item<Simd, KvType::i8, QkInt16>(a, it, partials);
  else
    run_item<Simd, KvType::bf16, QkF32>(a, it, partials);
}

}  // namespace attn::cpu_flash::avx2
