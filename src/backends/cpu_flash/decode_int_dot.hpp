// cpu_flash decode kernel: int8 and int4 per-token-head pair caches on integer dot products
// (AVX512-VNNI vpdpwssd). The codes widen to int16 pairs in a step or two (int8: one sign
// extension per 32 bytes; int4: zero-extend, shift, ternary logic per 16 bytes), where widening
// them into bf16 took byte-table lookups or a multiply, and vpdpwssd sums pairs of int16 products
// into int32 lanes exactly, faster than vdpbf16ps. So q is quantized per row to int16 (scale
// max|q| / 32767: finer than the bf16 q the other pair kernels take), and P·V's weights
// P · (V scale) per row and chunk to int16 (scale max w / 32767, where bf16 rounds each weight to
// 8 bits). Sums stay in range: |q| ≤ 32767, |code| ≤ 128, 256 dims: 2^30; a chunk's P·V: 64
// keys, 2^28. int4 keeps the kernel's zero-point algebra (see run, Int4) with c in place of
// 1 + c/16: a score is qsum + qscale · Σ q16·c / 16, a chunk's P·V wscale · Σ w16·c / 16.
// Part of the decode kernel (decode_impl.hpp), compiled once per decode build inside the
// namespace its .cpp names (ATTN_CF_NS, with ATTN_CF_VBMI 0 or 1).
#pragma once
#include "backends/cpu_flash/decode_chunk.hpp"

namespace attn::cpu_flash::ATTN_CF_NS {

constexpr float kInt16Max = 32767.0f;

/// acc + the pairwise int16 products of a and b (vpdpwssd). GCC 12 compiles the intrinsic over a
/// 16-accumulator tile into a copy of each accumulator per use plus spills; written out, each
/// accumulator keeps its register.
inline __m512i dpwssd(__m512i acc, __m512i a, __m512i b) {
  asm("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

/// The largest |x| of d values (a multiple of 16), and whether any is NaN or infinite.
inline float abs_max(const float* x, int d, bool& finite) {
  __m512 mx = _mm512_setzero_ps();
  __mmask16 bad = 0;
  for (int i = 0; i < d; i += 16) {
    const __m512 v = _mm512_abs_ps(_mm512_load_ps(x + i));
    bad |= _mm512_cmp_ps_mask(v, _mm512_set1_ps(std::numeric_limits<float>::max()), _CMP_NLE_UQ);  // inf or NaN
    mx = _mm512_max_ps(mx, v);
  }
  finite = bad == 0;
  return _mm512_reduce_max_ps(mx);
}

/// 32 fp32 values times f, rounded to int16 (saturating), as one vector in natural order.
inline __m512i to_int16x32(__m512 lo, __m512 hi, __m512 f) {
  const __m256i a = _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(lo, f)));
  const __m256i b = _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(hi, f)));
  return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}

/// d values of x (fp32, finite or not) as int16 into dst; returns the scale one unit stands for:
/// max|x| / 32767, 0 for an all-zero row, NaN when x holds NaN or infinity (whatever it then
/// multiplies turns NaN, as the same value would in the reference).
inline float quantize_int16(const float* x, int d, uint16_t* dst) {
  bool finite = true;
  const float mx = abs_max(x, d, finite);
  if (!finite || mx == 0.0f) {
    std::fill(dst, dst + d, uint16_t(0));
    return finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
  }
  const __m512 f = _mm512_set1_ps(kInt16Max / mx);
  for (int i = 0; i < d; i += 32) _mm512_store_si512(dst + i, to_int16x32(_mm512_load_ps(x + i), _mm512_load_ps(x + i + 16), f));
  return mx / kInt16Max;
}

/// A pair line's codes as 16 int16 pairs, natural order: K, 16 keys × a dim pair; V, a key pair ×
/// 16 dims. int8: 32 bytes sign-extended. int4: 16 bytes of two 4-bit codes each (c0 low, c1
/// high) as the dwords (c0, c1): zero-extended b, then (b | b << 12) & 0x000F000F.
template <KvType T>
inline __m512i pair_codes(const char* p) {
  if constexpr (T == KvType::i8) return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm512_ternarylogic_epi32(b, _mm512_slli_epi32(b, 12), _mm512_set1_epi32(0x000F000F), 0xA8);  // (a | b) & c
}
/// Bytes of one pair line's 16 codes pairs (the step between pair_codes vectors).
template <KvType T>
constexpr int kPairLineBytes = T == KvType::i8 ? 32 : 16;
/// What a sum of code products is divided by: int4's products see c where the kernel's algebra
/// has 1 + c/16.
template <KvType T>
constexpr float kCodeUnit = T == KvType::i4 ? 1.0f / 16.0f : 1.0f;

/// qk_pairs on integer codes: scores of rows [r0, r0 + RB) against the chunk's NL·16 keys, the
/// int16 q pair broadcast against each K line's 16 keys × 2 dims, int32 sums times the row's q
/// scale (int4: / 16, plus the row's Σq, see run). Prefetches the next chunk's K (and with pf_v
/// its V) as qk_pairs does.
template <KvType T, int RB, int NL>
inline void qk_pairs_int(Scratch& sc, int r0, const char* k, int64_t kpair, int d, const PairChunk& nx, int64_t nx_kpair, bool pf_v) {
  __m512i acc[RB][NL];
  for (auto& x : acc)
    for (auto& y : x) y = _mm512_setzero_si512();
  const int64_t nx_bytes = int64_t(nx.n) * pair_key_bytes<T>();  // K bytes of one dim pair = V bytes per dim pair
  for (int dp = 0; dp < d / 2; ++dp) {
    for (int64_t off = 0; off < nx_bytes; off += 64) {
      _mm_prefetch(nx.k + int64_t(dp) * nx_kpair + off, _MM_HINT_T1);
      if (pf_v) _mm_prefetch(nx.v + int64_t(dp) * nx_bytes + off, _MM_HINT_T1);
    }
    __m512i kv[NL];
    for (int l = 0; l < NL; ++l) kv[l] = pair_codes<T>(k + int64_t(dp) * kpair + kPairLineBytes<T> * l);
    for (int i = 0; i < RB; ++i) {
      const __m512i q = (__m512i)bcast_pair(&sc.qb[r0 + i][2 * dp]);
      for (int l = 0; l < NL; ++l) acc[i][l] = dpwssd(acc[i][l], q, kv[l]);
    }
  }
  for (int i = 0; i < RB; ++i) {
    const __m512 qs = _mm512_set1_ps(sc.qscale[r0 + i] * kCodeUnit<T>);
    const __m512 q0 = _mm512_set1_ps(T == KvType::i4 ? sc.qsum[r0 + i] : 0.0f);
    for (int l = 0; l < NL; ++l) _mm512_store_ps(&sc.s[r0 + i][16 * l], _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][l]), qs, q0));
  }
}

/// int4: what a chunk's P·V takes back out of every dim for the zero points: Σ w·z/16 over the
/// row's weights as quantized (w16 · wscale), vzb holding 1 + z/16 per key.
template <int CH>
inline float zero_point_correction(const uint16_t* w16, float wscale, const float* vzb) {
  __m512 acc = _mm512_setzero_ps();
  for (int x = 0; x < CH; x += 16) {
    const __m512 w = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(w16 + x))));
    acc = _mm512_fmadd_ps(w, _mm512_sub_ps(_mm512_load_ps(vzb + x), _mm512_set1_ps(1.0f)), acc);
  }
  return _mm512_reduce_add_ps(acc) * wscale;
}

/// O[RB rows, dims x0 .. x0 + 16·NC) = O·alpha + wscale · Σ w16·code (int4: / 16, less the
/// row's zero-point correction vcorr) over the chunk's key pairs: one pair line (a key pair × 16
/// dims) per vpdpwssd against the row's broadcast weight pair. Keys a row does not see have
/// weight 0 and finite codes, so no guard is needed.
template <KvType T, int RB, int NC>
inline void pv_pairs_int_tile(Scratch& sc, int r0, const char* v, int64_t vpair, int npairs, int x0, LineStream& pf) {
  __m512i acc[RB][NC];
  for (auto& x : acc)
    for (auto& y : x) y = _mm512_setzero_si512();
  const char* row = v + int64_t(x0) * pair_key_bytes<T>();  // a dim of a key pair: 2 bytes, or one of two int4 codes
  for (int p = 0; p < npairs; ++p, row += vpair) {
    pf.step();
    __m512i vv[NC];
    for (int j = 0; j < NC; ++j) vv[j] = pair_codes<T>(row + kPairLineBytes<T> * j);
    for (int i = 0; i < RB; ++i) {
      const __m512i w = (__m512i)bcast_pair(&sc.pb[r0 + i][2 * p]);
      for (int j = 0; j < NC; ++j) acc[i][j] = dpwssd(acc[i][j], w, vv[j]);
    }
  }
  for (int i = 0; i < RB; ++i) {
    const __m512 al = _mm512_set1_ps(sc.alpha[r0 + i]), ws = _mm512_set1_ps(sc.wscale[r0 + i] * kCodeUnit<T>);
    const __m512 corr = _mm512_set1_ps(T == KvType::i4 ? sc.vcorr[r0 + i] : 0.0f);
    for (int j = 0; j < NC; ++j) {
      float* o = &sc.o[r0 + i][x0 + 16 * j];
      const __m512 prev = _mm512_fmsub_ps(_mm512_load_ps(o), al, corr);
      _mm512_store_ps(o, _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][j]), ws, prev));
    }
  }
}

template <KvType T, int RB>
inline void pv_pairs_int(Scratch& sc, int rp, const char* v, int64_t vpair, int npairs, int d, LineStream pf = {}) {
  for_pv_tiles<RB>(rp, d, npairs, pf, [&](int r0, int x, auto nc, LineStream& s) {
    pv_pairs_int_tile<T, RB, decltype(nc)::value>(sc, r0, v, vpair, npairs, x, s);
  });
}

}  // namespace attn::cpu_flash::ATTN_CF_NS
