// cpu_flash decode kernel, AVX-512: work items of at most kDecodeMaxRows rows (one or a few query
// tokens × the GQA group) against a KV range — the shape of every decode step. Such an item
// does ~2 FLOP per KV byte, so it must stream the cache at the memory wall; what matters:
//  - KV is walked block by block; inside a block a (block, KV head) run is contiguous (HND), so
//    a chunk of ≤32 keys is one address range for K and one for V, and the next chunk's lines
//    are prefetched into L2 while this one computes (spread over the Q·Kᵀ micro-tiles: a burst
//    queues behind itself; L2 rather than L1 because L1 fill buffers are the scarce resource);
//  - each K/V vector is loaded once for all rows of the group;
//  - widening is cheap: bf16 rows widen with one unpack against zero per 16 values, in the
//    unpack order (q and the output accumulators use the same permuted order, undone at the
//    end), e4m3 goes to fp16 bits with a shift/and/add per 32 values, then vcvtph2ps;
//  - with bf16 q and cache both products run on vdpbf16ps: Q·Kᵀ on the raw rows, P·V on P
//    rounded to bf16 against pairs of V rows interleaved by the same unpack (so one V order
//    serves both P·V forms); the row sums use the rounded P, so the weights stay normalized;
//  - e4m3 with bf16 q (where the CPU has AVX512-VBMI): two 128-entry byte-table lookups
//    (vpermi2b) give the high and low bytes of each value's bf16 encoding, 64 values in 5 ops,
//    exact (the NaN code stays NaN); then both products run on vdpbf16ps as for bf16. With a
//    4-row tile (GQA ≥ 4) the widened vectors go straight into the dot products in the order the
//    lookups give (q stored in that order, the output undone at the end): 3–5 % faster than a
//    round trip through a bf16 scratch row (docs/decode-model.md), which smaller tiles keep;
//  - HND_PAIRS caches (Pairs: bf16, and fp8 on VBMI builds) skip the reduction and the unpacks:
//    K lines hold 16 keys × 2 dims, so Q·Kᵀ accumulates scores in lanes against broadcast q
//    pairs, and V lines hold 2 keys × 16 dims, the P·V operand as stored (qk_pairs, pv_pairs;
//    docs/decode-model.md measures both layouts). Their online-softmax step is a whole 64-key
//    block (the per-step costs, rescaling the output included, halve), and the next step's K
//    is prefetched during Q·Kᵀ, its V during P·V;
//  - no heap: the per-thread scratch is fixed-size (rows ≤ 16, head size ≤ 256);
//  - masked keys contribute exactly nothing: their scores are -inf, and on chunks where some
//    row's visible keys are an interval inside the chunk, P·V skips the others (0·NaN = NaN).
//
// Included by decode.avx512.cpp and decode.avx512vbmi.cpp, each defining ATTN_CF_NS (its own
// namespace, so code built with different flags never mixes) and ATTN_CF_VBMI (0 or 1).
#pragma once
#include "backends/cpu_flash/simd_avx512.hpp"
#include "backends/cpu_flash/decode.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "attn/numeric.hpp"

namespace attn::cpu_flash::ATTN_CF_NS {

constexpr int kChunk = 32;  // keys per online-softmax step on row caches: two score vectors per row
constexpr int kPairChunk = 64;  // on pair caches: a whole 64-key block, 16 KiB of bf16 K per KV head
constexpr int kMaxChunk = std::max(kChunk, kPairChunk);  // the scratch rows of scores and P
constexpr int kSlice = 32;  // head-size elements per load step (one 64-byte line of bf16)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// Where lane i of a slice's lo (hi = false) or hi vector comes from in the 32-element slice.
/// bf16 rows widen by unpacking 16-bit elements within 128-bit lanes: lo holds elements
/// 8L..8L+3 of each lane L, hi 8L+4..8L+7. Every other type is in natural order.
template <KvType T>
constexpr int slice_elem(bool hi, int i) {
  if constexpr (T == KvType::bf16) return (i / 4) * 8 + (hi ? 4 : 0) + i % 4;
  return (hi ? 16 : 0) + i;
}

/// 32 fp16 bit patterns as two fp32 vectors, natural order.
inline void f16x32(__m512i h, __m512& lo, __m512& hi) {
  lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
  hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
}

/// One 32-element slice of a K or V row as two fp32 vectors (e4m3 without its 2^8: see
/// kE4m3Rebias, folded into the scales).
template <KvType T>
inline void load_slice(const char* p, __m512& lo, __m512& hi) {
  if constexpr (T == KvType::bf16) {
    const __m512i v = _mm512_loadu_si512(p), z = _mm512_setzero_si512();
    lo = _mm512_castsi512_ps(_mm512_unpacklo_epi16(z, v));
    hi = _mm512_castsi512_ps(_mm512_unpackhi_epi16(z, v));
  } else if constexpr (T == KvType::f16) {
    f16x32(_mm512_loadu_si512(p), lo, hi);
  } else if constexpr (T == KvType::f32) {
    lo = _mm512_loadu_ps(p), hi = _mm512_loadu_ps(p + 64);
  } else if constexpr (T == KvType::e4m3) {
    // Byte b → fp16 bits: (b & 0x7f) << 7 with the sign moved from bit 14 to 15 by adding it
    // to itself (exact, subnormals included; the value is 2^-8 too small).
    const __m512i x = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    const __m512i a = _mm512_slli_epi16(x, 7);
    const __m512i b = _mm512_add_epi16(a, _mm512_and_si512(a, _mm512_set1_epi16(0x4000)));
    // The NaN codes (S.1111.111) become fp16 NaN.
    const __mmask32 nan = _mm512_cmpeq_epi16_mask(_mm512_and_si512(x, _mm512_set1_epi16(0x7f)), _mm512_set1_epi16(0x7f));
    f16x32(_mm512_mask_mov_epi16(b, nan, _mm512_or_si512(b, _mm512_set1_epi16(0x7e00))), lo, hi);
  } else {  // e5m2 is the top byte of an fp16
    f16x32(_mm512_slli_epi16(_mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 8), lo, hi);
  }
}

/// Which of 64 source elements lands at bf16 position p of e4m3x64_bf16_lanes' a0 (p < 32) or
/// a1 (p - 32): the byte unpacks interleave within 128-bit lanes.
constexpr int e4m3_lane_elem(int p) { return p < 32 ? 16 * (p / 8) + p % 8 : 16 * ((p - 32) / 8) + 8 + p % 8; }

#if ATTN_CF_VBMI
/// bf16 encodings of every e4m3 magnitude × 2^-8 (the same 2^-8 as the fp16-bit path, see
/// kE4m3Rebias), split into low and high bytes: 128-entry tables for vpermi2b. All values
/// are exact in bf16; the NaN code decodes like the fp16-bit path (finite).
/// bf16 bits of e4m3 magnitude em × 2^-8 (NaN for the NaN code), from the fields: normal E ≥ 1 is
/// (1 + M/8)·2^(E-15), subnormal M·2^-17 normalized by its top bit b.
constexpr uint16_t e4m3_bf16_bits(int em) {
  const int e = em >> 3, m = em & 7;
  if (em == 127) return 0x7fc0;  // the NaN code stays NaN
  if (e > 0) return uint16_t(((e + 112) << 7) | (m << 4));
  if (m == 0) return 0;
  const int b = m >= 4 ? 2 : m >= 2 ? 1 : 0;
  return uint16_t(((110 + b) << 7) | ((m - (1 << b)) << (7 - b)));
}
struct E4m3Table {
  alignas(64) uint8_t lo[128], hi[128];
};
constexpr E4m3Table make_e4m3_table() {
  E4m3Table t{};
  for (int em = 0; em < 128; ++em) t.lo[em] = uint8_t(e4m3_bf16_bits(em) & 0xff), t.hi[em] = uint8_t(e4m3_bf16_bits(em) >> 8);
  return t;
}
alignas(64) inline constexpr E4m3Table kE4m3Table = make_e4m3_table();
/// bf16 bits of e5m2 magnitude em (exact, no rebias: e5m2 has bf16's range and fewer mantissa
/// bits): normal (1 + M/4)·2^(E-15), subnormal M·2^-16, E = 31 infinity or NaN.
constexpr uint16_t e5m2_bf16_bits(int em) {
  const int e = em >> 2, m = em & 3;
  if (e == 31) return m == 0 ? 0x7f80 : 0x7fc0;
  if (e > 0) return uint16_t(((e + 112) << 7) | (m << 5));
  return m == 0 ? 0 : m == 1 ? uint16_t(111 << 7) : m == 2 ? uint16_t(112 << 7) : uint16_t((112 << 7) | (1 << 6));
}
constexpr E4m3Table make_e5m2_table() {
  E4m3Table t{};
  for (int em = 0; em < 128; ++em) t.lo[em] = uint8_t(e5m2_bf16_bits(em) & 0xff), t.hi[em] = uint8_t(e5m2_bf16_bits(em) >> 8);
  return t;
}
alignas(64) inline constexpr E4m3Table kE5m2Table = make_e5m2_table();

/// bf16 bits of int8 magnitude em (exact: every integer up to 256 is); em = 0 holds 128, the
/// magnitude of -128 (whose vpabsb is 0x80, index 0), and zeros are masked off before the lookup.
constexpr uint16_t i8_bf16_bits(int em) {
  const int m = em == 0 ? 128 : em;
  int e = 0;
  while ((2 << e) <= m) ++e;  // m in [2^e, 2^(e+1))
  return uint16_t(((e + 127) << 7) | (((m << 7) >> e) & 0x7f));
}
constexpr E4m3Table make_i8_table() {
  E4m3Table t{};
  for (int em = 0; em < 128; ++em) t.lo[em] = uint8_t(i8_bf16_bits(em) & 0xff), t.hi[em] = uint8_t(i8_bf16_bits(em) >> 8);
  return t;
}
alignas(64) inline constexpr E4m3Table kI8Table = make_i8_table();

/// The four 64-byte table vectors vpermi2b reads (e4m3's, or another fp8 format's), loaded once
/// per chunk.
struct E4m3Lut {
  __m512i lo0, lo1, hi0, hi1;
  explicit E4m3Lut(const E4m3Table& t = kE4m3Table)
      : lo0(_mm512_load_si512(t.lo)), lo1(_mm512_load_si512(t.lo + 64)), hi0(_mm512_load_si512(t.hi)),
        hi1(_mm512_load_si512(t.hi + 64)) {}
};

/// 64 e4m3 bytes (x) as 64 bf16 in lane order (see e4m3_lane_elem): two lookups, the sign, two
/// byte unpacks.
inline void e4m3x64_bf16_lanes(const E4m3Lut& t, __m512i x, __m512i& a0, __m512i& a1) {
  const __m512i lo = _mm512_permutex2var_epi8(t.lo0, x, t.lo1);
  __m512i hi = _mm512_permutex2var_epi8(t.hi0, x, t.hi1);
  hi = _mm512_ternarylogic_epi32(hi, x, _mm512_set1_epi8(char(0x80)), 0xF8);  // hi | (x & sign)
  a0 = _mm512_unpacklo_epi8(lo, hi), a1 = _mm512_unpackhi_epi8(lo, hi);
}
/// 64 int8 codes (x) as 64 bf16 in lane order, like e4m3x64_bf16_lanes: the magnitude (vpabsb)
/// looked up in kI8Table, zeros masked, the sign bit put back. Exact for all 256 codes.
inline void i8x64_bf16_lanes(const E4m3Lut& t, __m512i x, __m512i& a0, __m512i& a1) {
  const __mmask64 nz = _mm512_test_epi8_mask(x, x);
  const __m512i m = _mm512_abs_epi8(x);
  const __m512i lo = _mm512_maskz_permutex2var_epi8(nz, t.lo0, m, t.lo1);
  __m512i hi = _mm512_maskz_permutex2var_epi8(nz, t.hi0, m, t.hi1);
  hi = _mm512_ternarylogic_epi32(hi, x, _mm512_set1_epi8(char(0x80)), 0xF8);  // hi | (x & sign)
  a0 = _mm512_unpacklo_epi8(lo, hi), a1 = _mm512_unpackhi_epi8(lo, hi);
}

/// 64 e4m3 bytes as 64 bf16 in natural order (a0: elements 0..31, a1: 32..63). The qword
/// permute first puts source bytes 8L..8L+7 and 32+8L..32+8L+7 in 128-bit lane L, which is
/// what the byte unpacks after the lookups interleave.
inline void e4m3x64_bf16(const E4m3Lut& t, const char* p, __m512i& a0, __m512i& a1) {
  e4m3x64_bf16_lanes(t, _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 4, 1, 5, 2, 6, 3, 7), _mm512_loadu_si512(p)), a0, a1);
}

/// Rows [0, n) of d e4m3 values, `stride` bytes apart, into bf16 rows of the scratch buffer.
/// Lanes: in e4m3_lane_elem order within each 64 elements rather than natural order.
inline void e4m3_rows_bf16(const char* src, int64_t stride, int n, int d, uint16_t (*dst)[kMaxHeadSizeDecode], bool lanes = false) {
  const E4m3Lut t;
  for (int r = 0; r < n; ++r, src += stride)
    for (int x = 0; x < d; x += 64) {
      __m512i a0, a1;
      if (lanes)
        e4m3x64_bf16_lanes(t, _mm512_loadu_si512(src + x), a0, a1);
      else
        e4m3x64_bf16(t, src + x, a0, a1);
      _mm512_store_si512(&dst[r][x], a0), _mm512_store_si512(&dst[r][x + 32], a1);
    }
}
#endif

/// d elements (a multiple of 32) of a q row as fp32.
inline void load_row(const void* src, DType dt, int64_t off, int d, float* dst) {
  switch (dt) {
    case DType::float32:
      for (int x = 0; x < d; x += 16) _mm512_store_ps(dst + x, _mm512_loadu_ps(static_cast<const float*>(src) + off + x));
      break;
    case DType::bfloat16:
      for (int x = 0; x < d; x += 16)
        _mm512_store_ps(dst + x, _mm512_castsi512_ps(_mm512_slli_epi32(
                                     _mm512_cvtepu16_epi32(_mm256_loadu_si256(
                                         reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(src) + off + x))), 16)));
      break;
    default:  // float16
      for (int x = 0; x < d; x += 16)
        _mm512_store_ps(dst + x, _mm512_cvtph_ps(_mm256_loadu_si256(
                                     reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(src) + off + x))));
      break;
  }
}

/// fp32 → bf16 bits, round to nearest even, NaN kept quiet (as f32_to_bf16, 16 lanes).
inline __m256i bf16_rne(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  const __m512i b = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(u, _mm512_set1_epi32(0x400000)));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(b, 16));
}

/// store_row with the conversion in 16-lane vectors (d a multiple of 32).
inline void store_out_row(const KernelArgs& a, int64_t token, int head, const float* o, float m, float l) {
  const __m512 f = _mm512_set1_ps(row_factor(a, head, m, l));
  const int64_t base = token * a.o_tok_stride + int64_t(head) * a.o_head_stride;
  const int d = a.head_size_v;
  for (int x = 0; x < d; x += 16) {
    const __m512 v = _mm512_mul_ps(_mm512_load_ps(o + x), f);
    if (a.out_dtype == DType::float32)
      _mm512_storeu_ps(static_cast<float*>(a.out) + base + x, v);
    else if (a.out_dtype == DType::bfloat16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(a.out) + base + x), bf16_rne(v));
    else
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(a.out) + base + x),
                          _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
}

/// Per-thread scratch, fixed size: q rows in the K order, scores / probabilities, the output
/// accumulators in the V order, and the online-softmax state.
struct alignas(64) Scratch {
  float q[kDecodeMaxRows][kMaxHeadSizeDecode];      // fp32 q in K order, per slice: lo half then hi half
  uint16_t qb[kDecodeMaxRows][kMaxHeadSizeDecode];  // bf16 q, natural order (bf16 dot products)
  float s[kDecodeMaxRows][kMaxChunk];
  uint16_t pb[kDecodeMaxRows][kMaxChunk];              // P in bf16 for the vdpbf16ps P·V
#if ATTN_CF_VBMI
  uint16_t kb[kChunk][kMaxHeadSizeDecode], vb[kChunk][kMaxHeadSizeDecode];  // e4m3 chunk as bf16
#endif
  float o[kDecodeMaxRows][kMaxHeadSizeDecode];      // per slice: lo half then hi half
  float m[kDecodeMaxRows], m_new[kDecodeMaxRows], alpha[kDecodeMaxRows];
  __m512 l[kDecodeMaxRows];  // row sums, lane-wise (reduced once at the end)
  int vlo[kDecodeMaxRows], vhi[kDecodeMaxRows];      // visible keys of the chunk, per row
};

/// Q·Kᵀ for RB rows × KB keys (RB·KB = 16 accumulators), dot products along the head size,
/// summed by one transpose-add tree. Bf16Dot: vdpbf16ps on raw bf16 q and K (exact products).
/// T = e4m3 with Bf16Dot (VBMI builds): K rows are raw e4m3, widened 64 values at a time in
/// registers straight into the dot operands (lane order; q is stored in the same order).
template <KvType T, bool Bf16Dot, int RB, int KB>
inline void qk_tile(const Scratch& sc, int r0, const char* const* k, int d, float* s) {
  __m512 acc[16];
  for (auto& a : acc) a = _mm512_setzero_ps();
#if ATTN_CF_VBMI
  if constexpr (Bf16Dot && T == KvType::e4m3) {
    const E4m3Lut t;
    for (int x = 0; x < d; x += 64) {
      __m512i k0[KB], k1[KB];
      for (int j = 0; j < KB; ++j) e4m3x64_bf16_lanes(t, _mm512_loadu_si512(k[j] + x), k0[j], k1[j]);
      for (int i = 0; i < RB; ++i) {
        const __m512i q0 = _mm512_load_si512(&sc.qb[r0 + i][x]), q1 = _mm512_load_si512(&sc.qb[r0 + i][x + 32]);
        for (int j = 0; j < KB; ++j)
          acc[i * KB + j] = _mm512_dpbf16_ps(_mm512_dpbf16_ps(acc[i * KB + j], (__m512bh)q0, (__m512bh)k0[j]), (__m512bh)q1, (__m512bh)k1[j]);
      }
    }
  } else
#endif
  for (int x = 0; x < d; x += kSlice) {
    if constexpr (Bf16Dot) {
      __m512i kv[KB];
      for (int j = 0; j < KB; ++j) kv[j] = _mm512_loadu_si512(k[j] + int64_t(x) * 2);
      for (int i = 0; i < RB; ++i) {
        const __m512i qv = _mm512_load_si512(&sc.qb[r0 + i][x]);
        for (int j = 0; j < KB; ++j) acc[i * KB + j] = _mm512_dpbf16_ps(acc[i * KB + j], (__m512bh)qv, (__m512bh)kv[j]);
      }
    } else {
      __m512 klo[KB], khi[KB];
      for (int j = 0; j < KB; ++j) load_slice<T>(k[j] + int64_t(x) * kv_bytes<T>(), klo[j], khi[j]);
      for (int i = 0; i < RB; ++i) {
        const __m512 qlo = _mm512_load_ps(&sc.q[r0 + i][x]), qhi = _mm512_load_ps(&sc.q[r0 + i][x + 16]);
        for (int j = 0; j < KB; ++j) acc[i * KB + j] = _mm512_fmadd_ps(qhi, khi[j], _mm512_fmadd_ps(qlo, klo[j], acc[i * KB + j]));
      }
    }
  }
  alignas(64) float sums[16];
  Simd::reduce(acc, sums);
  // sums[i·KB + j] for row i, key j: 128-bit groups of 4 keys of one row, stored whole.
  for (int q4 = 0; q4 < 16; q4 += 4) _mm_storeu_ps(s + (q4 / KB) * kMaxChunk + q4 % KB, _mm_load_ps(sums + q4));
}

/// O[RB rows] = O·alpha + P·V over the chunk's n keys for slices [x0, x0 + NS·32). Guard: some
/// row sees only an interval of the chunk; the other keys are skipped for that row.
template <KvType T, int RB, int NS, bool Guard>
inline void pv_tile(Scratch& sc, int r0, const char* v0, int64_t vstride, int n, int x0) {
  __m512 acc[RB][2 * NS];
  for (int i = 0; i < RB; ++i) {
    const __m512 a = _mm512_set1_ps(sc.alpha[r0 + i]);
    for (int j = 0; j < 2 * NS; ++j) acc[i][j] = _mm512_mul_ps(_mm512_load_ps(&sc.o[r0 + i][x0 + 16 * j]), a);
  }
  const char* row = v0 + int64_t(x0) * kv_bytes<T>();
  for (int t = 0; t < n; ++t, row += vstride) {
    __m512 v[2 * NS];
    for (int j = 0; j < NS; ++j) load_slice<T>(row + int64_t(j) * kSlice * kv_bytes<T>(), v[2 * j], v[2 * j + 1]);
    for (int i = 0; i < RB; ++i) {
      if (Guard && (t < sc.vlo[r0 + i] || t >= sc.vhi[r0 + i])) continue;
      const __m512 p = _mm512_set1_ps(sc.s[r0 + i][t]);
      for (int j = 0; j < 2 * NS; ++j) acc[i][j] = _mm512_fmadd_ps(p, v[j], acc[i][j]);
    }
  }
  for (int i = 0; i < RB; ++i)
    for (int j = 0; j < 2 * NS; ++j) _mm512_store_ps(&sc.o[r0 + i][x0 + 16 * j], acc[i][j]);
}

/// The vdpbf16ps form of pv_tile: keys in pairs, V rows t and t+1 interleaved by the unpack
/// that widening uses, P pairs broadcast as one 32-bit word. An odd last key pairs with zeros.
#if ATTN_CF_VBMI
/// pv_tile_dot on raw e4m3 V rows (NS even, 64-element steps): each row pair is widened in
/// registers (lane order, see e4m3_lane_elem) and interleaved by the same 16-bit unpack, so the
/// accumulators hold the elements of e4m3_rows_bf16(lanes) rows in the bf16 slice order.
template <int RB, int NS>
inline void pv_tile_dot_e4m3(Scratch& sc, int r0, const char* v0, int64_t vstride, int n, int x0) {
  static_assert(NS % 2 == 0);
  const E4m3Lut lut;
  __m512 acc[RB][2 * NS];
  for (int i = 0; i < RB; ++i) {
    const __m512 a = _mm512_set1_ps(sc.alpha[r0 + i]);
    for (int j = 0; j < 2 * NS; ++j) acc[i][j] = _mm512_mul_ps(_mm512_load_ps(&sc.o[r0 + i][x0 + 16 * j]), a);
  }
  const char* row = v0 + x0;
  for (int t = 0; t < n; t += 2, row += 2 * vstride) {
    __m512i v[2 * NS];
    for (int j = 0; j < NS / 2; ++j) {
      __m512i a0, a1, b0 = _mm512_setzero_si512(), b1 = _mm512_setzero_si512();
      e4m3x64_bf16_lanes(lut, _mm512_loadu_si512(row + j * 64), a0, a1);
      if (t + 1 < n) e4m3x64_bf16_lanes(lut, _mm512_loadu_si512(row + vstride + j * 64), b0, b1);
      v[4 * j] = _mm512_unpacklo_epi16(a0, b0), v[4 * j + 1] = _mm512_unpackhi_epi16(a0, b0);
      v[4 * j + 2] = _mm512_unpacklo_epi16(a1, b1), v[4 * j + 3] = _mm512_unpackhi_epi16(a1, b1);
    }
    for (int i = 0; i < RB; ++i) {
      const __m512bh p = (__m512bh)_mm512_castps_si512(_mm512_broadcastss_ps(_mm_load_ss(reinterpret_cast<const float*>(&sc.pb[r0 + i][t]))));
      for (int j = 0; j < 2 * NS; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], p, (__m512bh)v[j]);
    }
  }
  for (int i = 0; i < RB; ++i)
    for (int j = 0; j < 2 * NS; ++j) _mm512_store_ps(&sc.o[r0 + i][x0 + 16 * j], acc[i][j]);
}
#endif

template <int RB, int NS>
inline void pv_tile_dot(Scratch& sc, int r0, const char* v0, int64_t vstride, int n, int x0) {
  __m512 acc[RB][2 * NS];
  for (int i = 0; i < RB; ++i) {
    const __m512 a = _mm512_set1_ps(sc.alpha[r0 + i]);
    for (int j = 0; j < 2 * NS; ++j) acc[i][j] = _mm512_mul_ps(_mm512_load_ps(&sc.o[r0 + i][x0 + 16 * j]), a);
  }
  const char* row = v0 + int64_t(x0) * 2;
  for (int t = 0; t < n; t += 2, row += 2 * vstride) {
    __m512i v[2 * NS];
    for (int j = 0; j < NS; ++j) {
      const __m512i a = _mm512_loadu_si512(row + j * 64);
      const __m512i b = t + 1 < n ? _mm512_loadu_si512(row + vstride + j * 64) : _mm512_setzero_si512();
      v[2 * j] = _mm512_unpacklo_epi16(a, b), v[2 * j + 1] = _mm512_unpackhi_epi16(a, b);
    }
    for (int i = 0; i < RB; ++i) {
      const __m512bh p = (__m512bh)_mm512_castps_si512(_mm512_broadcastss_ps(_mm_load_ss(reinterpret_cast<const float*>(&sc.pb[r0 + i][t]))));
      for (int j = 0; j < 2 * NS; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], p, (__m512bh)v[j]);
    }
  }
  for (int i = 0; i < RB; ++i)
    for (int j = 0; j < 2 * NS; ++j) _mm512_store_ps(&sc.o[r0 + i][x0 + 16 * j], acc[i][j]);
}


/// E4m3: v0 holds raw e4m3 rows (pv_tile_dot_e4m3; RB = 4, d a multiple of 64).
template <int RB, bool E4m3 = false>
inline void pv_chunk_dot(Scratch& sc, int rp, const char* v0, int64_t vstride, int n, int d) {
  constexpr int NS = RB == 1 ? 4 : 8 / RB;
  for (int r0 = 0; r0 < rp; r0 += RB) {
    int x = 0;
    for (; x + NS * kSlice <= d; x += NS * kSlice) {
#if ATTN_CF_VBMI
      if constexpr (E4m3) {
        pv_tile_dot_e4m3<RB, NS>(sc, r0, v0, vstride, n, x);
        continue;
      }
#endif
      pv_tile_dot<RB, NS>(sc, r0, v0, vstride, n, x);
    }
    if constexpr (!E4m3)
      for (; x < d; x += kSlice) pv_tile_dot<RB, 1>(sc, r0, v0, vstride, n, x);
  }
}

template <KvType T, int RB, bool Guard>
inline void pv_chunk(Scratch& sc, int rp, const char* v0, int64_t vstride, int n, int d) {
  // 2·NS accumulator vectors per row: 16 in all for 2 and 4 rows; 8 for one row, so the V
  // vectors of a step still fit in the 32 registers.
  constexpr int NS = RB == 1 ? 4 : 8 / RB;
  for (int r0 = 0; r0 < rp; r0 += RB) {
    int x = 0;
    for (; x + NS * kSlice <= d; x += NS * kSlice) pv_tile<T, RB, NS, Guard>(sc, r0, v0, vstride, n, x);
    for (; x < d; x += kSlice) pv_tile<T, RB, 1, Guard>(sc, r0, v0, vstride, n, x);
  }
}


// ---- HND_PAIRS caches (bf16 q and cache): dot products along lanes, no reduction tree ----
// Chunks start at multiples of 16 keys (whole K lines; block sizes are multiples of 16) and hold
// 16 to 64 keys of one block (whole K lines); keys of a chunk outside the item's range are masked like causal
// ones. K of a chunk: per dim pair NL lines of 16 keys × 2 dims, kpair bytes apart. V: per key
// pair one row of d dims × 2 keys, vpair bytes apart.

/// Two adjacent bf16 values (a q pair, a P pair) broadcast to every dword: the dot operand that
/// folds into vdpbf16ps as a broadcast memory operand.
inline __m512bh bcast_pair(const uint16_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return (__m512bh)_mm512_set1_epi32(v);
}

/// Lines to prefetch into L2 a few at a time, spread over a loop.
struct LineStream {
  const char* p = nullptr;
  const char* end = nullptr;
  int per_step = 0;
  void step() {
    for (int i = 0; i < per_step && p < end; ++i, p += 64) _mm_prefetch(p, _MM_HINT_T1);
  }
};

/// Where a chunk of a pair-ordered run starts and how many keys (16, 32, 48 or 64) it holds.
struct PairChunk {
  const char* k = nullptr;
  const char* v = nullptr;
  int n = 0;
};

/// The chunk at key c (a multiple of 16) of a range ending at `end`, in the (block, KV head) run
/// whose K starts at run_k (V v_off bytes further): kPairChunk keys, fewer at the block's or the range's
/// end (rounded up to whole K lines).
inline PairChunk pair_chunk_at(const char* run_k, int64_t v_off, int64_t vpair, int32_t c, int32_t end, int bs, int64_t eb) {
  const int32_t off = c % bs;
  const int n = std::min<int32_t>({kPairChunk, bs - off, (end - c + 15) / 16 * 16});
  return {run_k + int64_t(off) * 2 * eb, run_k + v_off + int64_t(off / 2) * vpair, n};
}

/// A pair line's bytes of the chunk as bf16 operand vectors: one vector per 16 keys (K) or per
/// 16 dims (V). bf16: NL lines as they are; fp8 (VBMI builds): NL·32 bytes (64-byte lines, the
/// last one half for odd NL) widened exactly by the byte tables, natural order.
template <KvType T, int NL>
inline void pair_lines(const char* p, __m512i* out) {
  if constexpr (T == KvType::bf16) {
    for (int l = 0; l < NL; ++l) out[l] = _mm512_loadu_si512(p + 64 * l);
  } else {
#if ATTN_CF_VBMI
    const E4m3Lut t(T == KvType::e4m3 ? kE4m3Table : T == KvType::i8 ? kI8Table : kE5m2Table);
    for (int l = 0; l < NL; l += 2) {
      __m512i a0, a1;
      const __m512i raw = l + 1 < NL ? _mm512_loadu_si512(p + 32 * l) : _mm512_maskz_loadu_epi8(0xffffffffu, p + 32 * l);
      const __m512i x = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 4, 1, 5, 2, 6, 3, 7), raw);
      if constexpr (T == KvType::i8)
        i8x64_bf16_lanes(t, x, a0, a1);
      else
        e4m3x64_bf16_lanes(t, x, a0, a1);
      out[l] = a0;
      if (l + 1 < NL) out[l + 1] = a1;
    }
#endif
  }
}

/// Scores of rows [r0, r0 + RB) against the chunk's NL·16 keys: per dim pair the keys' K values
/// (pair_lines), vdpbf16ps with the row's q pair broadcast (scores accumulate in lanes). Short
/// tiles keep two accumulator chains (even and odd pairs) so the products do not wait on each
/// other. While at it, one dim pair's share of the next chunk (nx) goes to L2: its K bytes of
/// that pair, and with pf_v as many V bytes (the kernel leaves V to pv_pairs; the stage bench,
/// which has no P·V, takes both here).
template <KvType T, int RB, int NL>
inline void qk_pairs(Scratch& sc, int r0, const char* k, int64_t kpair, int d, const PairChunk& nx, int64_t nx_kpair, bool pf_v = true) {
  constexpr int NA = RB < 4 ? 2 : 1;
  constexpr int64_t eb = kv_bytes<T>();
  __m512 acc[NA][RB][NL];
  for (auto& x : acc)
    for (auto& y : x)
      for (auto& z : y) z = _mm512_setzero_ps();
  const int64_t nx_bytes = int64_t(nx.n) * 2 * eb;  // K bytes of one dim pair = V bytes per dim pair
  for (int dp = 0; dp < d / 2; dp += NA)
    for (int c = 0; c < NA; ++c) {
      for (int64_t off = 0; off < nx_bytes; off += 64) {
        _mm_prefetch(nx.k + int64_t(dp + c) * nx_kpair + off, _MM_HINT_T1);
        if (pf_v) _mm_prefetch(nx.v + int64_t(dp + c) * nx_bytes + off, _MM_HINT_T1);
      }
      __m512i kv[NL];
      pair_lines<T, NL>(k + int64_t(dp + c) * kpair, kv);
      for (int i = 0; i < RB; ++i) {
        const __m512bh q = bcast_pair(&sc.qb[r0 + i][2 * (dp + c)]);
        for (int l = 0; l < NL; ++l) acc[c][i][l] = _mm512_dpbf16_ps(acc[c][i][l], q, (__m512bh)kv[l]);
      }
    }
  for (int i = 0; i < RB; ++i)
    for (int l = 0; l < NL; ++l) _mm512_store_ps(&sc.s[r0 + i][16 * l], NA == 2 ? _mm512_add_ps(acc[0][i][l], acc[NA - 1][i][l]) : acc[0][i][l]);
}

/// qk_pairs for a chunk of n keys (16, 32, 48 or 64: whole K lines).
template <KvType T, int RB>
inline void qk_pairs_n(Scratch& sc, int r0, const char* k, int64_t kpair, int d, int n, const PairChunk& nx, int64_t nx_kpair, bool pf_v) {
  switch (n / 16) {
    case 1: return qk_pairs<T, RB, 1>(sc, r0, k, kpair, d, nx, nx_kpair, pf_v);
    case 2: return qk_pairs<T, RB, 2>(sc, r0, k, kpair, d, nx, nx_kpair, pf_v);
    case 3: return qk_pairs<T, RB, 3>(sc, r0, k, kpair, d, nx, nx_kpair, pf_v);
    default: return qk_pairs<T, RB, 4>(sc, r0, k, kpair, d, nx, nx_kpair, pf_v);
  }
}

/// O[RB rows, dims x0 .. x0 + 16·NC) = O·alpha + P·V over the chunk's key pairs: one V line
/// (2 keys × 16 dims) per vdpbf16ps against the row's broadcast P pair (P in natural dim order).
/// Guard: a row sees only [vlo, vhi) of the chunk; a pair it half sees has the other key's values
/// zeroed (0·NaN would be NaN), a pair it does not see is skipped.
template <KvType T, int RB, int NC, bool Guard>
inline void pv_pairs_tile(Scratch& sc, int r0, const char* v, int64_t vpair, int npairs, int x0, LineStream& pf) {
  constexpr int LB = T == KvType::bf16 ? 1 : 2;  // bf16 vectors per 64-byte line
  __m512 acc[RB][NC];
  for (int i = 0; i < RB; ++i) {
    const __m512 al = _mm512_set1_ps(sc.alpha[r0 + i]);
    for (int j = 0; j < NC; ++j) acc[i][j] = _mm512_mul_ps(_mm512_load_ps(&sc.o[r0 + i][x0 + 16 * j]), al);
  }
  const char* row = v + int64_t(x0) * 2 * kv_bytes<T>();
  for (int p = 0; p < npairs; ++p, row += vpair) {
    pf.step();
    __m512i vv[NC];
    for (int j = 0; j < NC; j += LB) pair_lines<T, LB>(row + 64 * (j / LB), vv + j);
    for (int i = 0; i < RB; ++i) {
      const __m512bh pp = bcast_pair(&sc.pb[r0 + i][2 * p]);
      if constexpr (Guard) {
        const int t = 2 * p, lo = sc.vlo[r0 + i], hi = sc.vhi[r0 + i];
        const bool a = t >= lo && t < hi, b = t + 1 >= lo && t + 1 < hi;
        if (!a && !b) continue;
        if (!(a && b)) {  // keep the visible key's half of each dword: even halves are key t
          const __mmask32 keep = a ? 0x55555555u : 0xAAAAAAAAu;
          for (int j = 0; j < NC; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], pp, (__m512bh)_mm512_maskz_mov_epi16(keep, vv[j]));
          continue;
        }
      }
      for (int j = 0; j < NC; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], pp, (__m512bh)vv[j]);
    }
  }
  for (int i = 0; i < RB; ++i)
    for (int j = 0; j < NC; ++j) _mm512_store_ps(&sc.o[r0 + i][x0 + 16 * j], acc[i][j]);
}

template <KvType T, int RB, bool Guard>
inline void pv_pairs(Scratch& sc, int rp, const char* v, int64_t vpair, int npairs, int d, LineStream pf = {}) {
  // RB·NC ≤ 16 accumulators, the V lines of a step beside them.
  constexpr int NC = RB == 4 ? 4 : 8;
  // pf: spread over every pair step of every tile below (NC-wide tiles, then 32-dim ones).
  const int steps = rp / RB * (d / (16 * NC) + d % (16 * NC) / 32) * npairs;
  if (pf.p && steps > 0) pf.per_step = int(((pf.end - pf.p) / 64 + steps - 1) / steps);
  for (int r0 = 0; r0 < rp; r0 += RB) {
    int x = 0;
    for (; x + 16 * NC <= d; x += 16 * NC) pv_pairs_tile<T, RB, NC, Guard>(sc, r0, v, vpair, npairs, x, pf);
    for (; x < d; x += 32) pv_pairs_tile<T, RB, 2, Guard>(sc, r0, v, vpair, npairs, x, pf);
  }
}


inline void prefetch_l2(const char* p, int64_t bytes) {
  for (int64_t off = 0; off < bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T1);
}

/// Pairs: the cache is HND_PAIRS (T = bf16 with Bf16Dot; qk_pairs / pv_pairs, P·V in natural
/// dim order); otherwise rows (HND / NHD). Token: a per-token-head cache (pairs only): each key's
/// K scale multiplies its score, its V scale its weight P before P is rounded to bf16 (the row
/// sums take P unscaled).
template <KvType T, bool Bf16Dot, int RB, bool Pairs = false, bool Token = false>
void run(const KernelArgs& a, const WorkItem& it, float* partials) {
  static_assert(!Pairs || (Bf16Dot && (T == KvType::bf16 || (ATTN_CF_VBMI && (T == KvType::e4m3 || T == KvType::e5m2 || T == KvType::i8)))),
                "the pair kernel reads bf16 caches (and fp8 / int8 ones on VBMI builds) with bf16 q");
  static_assert(!Token || Pairs, "per-token-head scales are read by the pair kernel");
  static_assert(T != KvType::i8 || Token, "int8 codes come with per-token-head scales");
  constexpr int KB = 16 / RB;
  constexpr int CH = Pairs ? kPairChunk : kChunk, NV = CH / 16;  // keys per online-softmax step
  // e4m3 rows with dot products (VBMI builds only): 4-row tiles widen K and V in registers
  // (fused, below); smaller tiles convert each chunk to bf16 rows in scratch and then run exactly
  // as a bf16 cache does (TK is the type the products see). Pair caches widen in pair_lines.
  constexpr bool Fp8Dot = Bf16Dot && T == KvType::e4m3 && !Pairs;
  static_assert(!Fp8Dot || ATTN_CF_VBMI, "e4m3 dot products need the VBMI table lookups");
  constexpr KvType TK = Fp8Dot ? KvType::bf16 : T;
  thread_local Scratch sc;
  const int g = a.group, d = a.head_size, rows = item_rows(it, g), rp = (rows + RB - 1) / RB * RB;
  const int s_idx = it.seq, h = it.kv_head, bs = a.kv.block_size;
  const int64_t eb = kv_bytes<T>(), row_bytes = int64_t(d) * eb, tstride = a.kv.token_stride * eb;
  const char* base = static_cast<const char*>(a.kv.base);
  const int32_t* bt = a.block_table + int64_t(s_idx) * a.max_blocks_per_seq;
  auto k_row = [&](int32_t key) {
    return base + (int64_t(bt[key / bs]) * a.kv.block_stride + int64_t(key % bs) * a.kv.token_stride +
                   int64_t(h) * a.kv.head_stride) * eb;
  };
  const int64_t v_off = a.kv.v_offset * eb;
  // Keys [c, c + n) of one block: their rows start at k_row(c), tstride apart.
  auto chunk_len = [&](int32_t c) { return std::min<int32_t>({kChunk, it.kv_end - c, bs - c % bs}); };
  auto prefetch_chunk = [&](int32_t c, int j0, int j1) {
    if (c >= it.kv_end) return;
    const int n = chunk_len(c);
    const char* k = k_row(c);
    for (int j = j0; j < std::min(j1, n); ++j) prefetch_l2(k + j * tstride, row_bytes), prefetch_l2(k + j * tstride + v_off, row_bytes);
  };
  // HND_PAIRS: K dim pairs 2·bs elements apart, V key pairs 2·w (w = token_stride, the width).
  const int64_t kpair = 2 * int64_t(bs) * eb, vpair = 2 * a.kv.token_stride * eb;
  auto pair_chunk = [&](int32_t c) -> PairChunk {
    if (c >= it.kv_end) return {};
    const char* run_k = base + (int64_t(bt[c / bs]) * a.kv.block_stride + int64_t(h) * a.kv.head_stride) * eb;
    return pair_chunk_at(run_k, v_off, vpair, c, it.kv_end, bs, eb);
  };
  if constexpr (Pairs) {
    const PairChunk f = pair_chunk(it.kv_begin - it.kv_begin % 16);
    for (int dp = 0; dp < d / 2; ++dp) prefetch_l2(f.k + dp * kpair, f.n * 2 * eb);
    prefetch_l2(f.v, int64_t(f.n / 2) * vpair);
  } else {
    prefetch_chunk(it.kv_begin, 0, kChunk);
  }
  // e4m3 with a 4-row tile: K and V are widened in registers straight into the dot operands
  // (no scratch round trip); the tile's registers leave room for that at 4 rows only.
  constexpr bool fused = Fp8Dot && RB == 4;

  // q rows (token-major, the group's heads adjacent), zero-padded to a whole row block.
  const int64_t tok0 = a.query_start_loc[s_idx] + it.q_begin;
  for (int r = 0; r < rp; ++r) {
    const int64_t e = (tok0 + r / g) * a.q_tok_stride + int64_t(h * g + r % g) * a.q_head_stride;
    alignas(64) float nat[kMaxHeadSizeDecode];
    if (r < rows)
      load_row(a.q, a.q_dtype, e, d, nat);
    else
      std::fill(nat, nat + d, 0.0f);
    for (int x = 0; x < d; x += kSlice) {
      if constexpr (fused) {  // q in the lane order the fused e4m3 widening gives K
        if (x % 64 == 0)
          for (int p = 0; p < 64; ++p) sc.qb[r][x + p] = f32_to_bf16(nat[x + e4m3_lane_elem(p)]);
      } else if constexpr (Bf16Dot) {  // exact: the dot kernels serve bf16 q only
        const __m512i b = _mm512_castsi256_si512(bf16_rne(_mm512_load_ps(nat + x)));
        _mm512_store_si512(&sc.qb[r][x], _mm512_inserti64x4(b, bf16_rne(_mm512_load_ps(nat + x + 16)), 1));
      } else {  // fp32 q in the order K rows widen to: lo half at [x, x+16), hi at [x+16, x+32)
        for (int i = 0; i < 16; ++i) sc.q[r][x + i] = nat[x + slice_elem<T>(false, i)], sc.q[r][x + 16 + i] = nat[x + slice_elem<T>(true, i)];
      }
    }
    sc.m[r] = kNegInf, sc.l[r] = _mm512_setzero_ps(), sc.alpha[r] = 1.0f;
  }
  for (int r = 0; r < rp; ++r) std::fill(sc.o[r], sc.o[r] + d, 0.0f);

  const int32_t qlen = a.query_start_loc[s_idx + 1] - a.query_start_loc[s_idx];
  const int32_t first_pos = a.seq_lens[s_idx] - qlen + it.q_begin;
  const float sscale = a.scale * a.kv.k_scales[h] * (T == KvType::e4m3 ? kE4m3Rebias : 1.0f);
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);

  for (int32_t c = Pairs ? it.kv_begin - it.kv_begin % 16 : it.kv_begin; c < it.kv_end;) {
    const PairChunk pc = Pairs ? pair_chunk(c) : PairChunk{};
    const int n = Pairs ? pc.n : chunk_len(c);
    const char* k0 = Pairs ? pc.k : k_row(c);
    const char* kp[kChunk + 16];
    const char* kq = k0;  // the rows the products read
    int64_t kqs = tstride;
#if ATTN_CF_VBMI
    if constexpr (Fp8Dot && !fused) {
      e4m3_rows_bf16(k0, tstride, n, d, sc.kb);
      kq = reinterpret_cast<const char*>(sc.kb), kqs = sizeof(sc.kb[0]);
    }
#endif
    for (int j = 0; j < kChunk + 16; ++j) kp[j] = kq + std::min(j, n - 1) * kqs;  // padding repeats a real row
    const int32_t next = c + n;
    // Token: this chunk's K scales (times the softmax scale) and V scales, one vector per 16 keys.
    alignas(64) float kts[kPairChunk], vts[kPairChunk];
    if constexpr (Token) {
      const int64_t t0 = token_scale_index(a.kv, bt[c / bs], c % bs, h), nkv = a.kv.num_kv_heads;
      for (int j = 0; j < n; ++j) kts[j] = a.kv.k_token_scales[t0 + j * nkv] * sscale, vts[j] = a.kv.v_token_scales[t0 + j * nkv];
      for (int j = n; j < kPairChunk; ++j) kts[j] = vts[j] = 0.0f;  // lanes past the chunk: masked
    }

    PairChunk nx{};
    if constexpr (Pairs) {
      nx = pair_chunk(next);
      const PairChunk none{};
      for (int r0 = 0; r0 < rp; r0 += RB) qk_pairs_n<T, RB>(sc, r0, k0, kpair, d, n, r0 == 0 ? nx : none, kpair, false);
    } else
    for (int r0 = 0; r0 < rp; r0 += RB)
      for (int j0 = 0; j0 < n; j0 += KB) {
        if (r0 == 0) prefetch_chunk(next, j0, j0 + KB);
        if constexpr (Fp8Dot) {
          if constexpr (fused)
            qk_tile<KvType::e4m3, true, RB, KB>(sc, r0, kp + j0, d, &sc.s[r0][j0]);
          else
            qk_tile<TK, true, RB, KB>(sc, r0, kp + j0, d, &sc.s[r0][j0]);
        } else {
          qk_tile<TK, Bf16Dot, RB, KB>(sc, r0, kp + j0, d, &sc.s[r0][j0]);
        }
      }

    bool guard = false;
    for (int r = 0; r < rows; ++r) {
      const int32_t pos = first_pos + r / g;
      // Visible keys of this row in the chunk: an interval [vlo, vhi) relative to c.
      int vlo = 0, vhi = n;
      if (a.causal) vhi = std::clamp(pos + 1 - c, 0, n);
      if (a.window > 0) vlo = std::clamp(pos - a.window + 1 - c, 0, n);
      vlo = std::max(vlo, it.kv_begin - c), vhi = std::min(vhi, it.kv_end - c);  // pair chunks start aligned
      if (vhi < vlo) vhi = vlo;
      sc.vlo[r] = vlo, sc.vhi[r] = vhi;
      guard |= vlo > 0 || vhi < n;
      __m512 sv[NV];
      __m512 mx = _mm512_set1_ps(kNegInf);
      __mmask16 nan = 0;  // a visible NaN score makes the row NaN (vmaxps would drop it)
      const float slope = a.alibi_slopes ? a.alibi_slopes[h * g + r % g] : 0.0f;
      for (int x = 0; x < CH; x += 16) {
        __m512 v = _mm512_mul_ps(_mm512_load_ps(&sc.s[r][x]), Token ? _mm512_load_ps(kts + x) : _mm512_set1_ps(sscale));
        if (a.soft_cap > 0) {  // cap·tanh(s/cap) = cap·(1 − 2/(e^{2s/cap} + 1)), before any mask
          const __m512 e = Simd::exp(_mm512_mul_ps(v, _mm512_set1_ps(2.0f / a.soft_cap)));
          v = _mm512_mul_ps(_mm512_set1_ps(a.soft_cap),
                            _mm512_sub_ps(_mm512_set1_ps(1.0f), _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f)))));
        }
        const __m512 j = _mm512_add_ps(iota, _mm512_set1_ps(float(x)));
        if (a.alibi_slopes) v = _mm512_fmadd_ps(_mm512_set1_ps(slope), _mm512_add_ps(j, _mm512_set1_ps(float(c - pos))), v);
        const __mmask16 live = _mm512_cmp_ps_mask(j, _mm512_set1_ps(float(vlo)), _CMP_GE_OQ) &
                               _mm512_cmp_ps_mask(j, _mm512_set1_ps(float(vhi)), _CMP_LT_OQ);
        sv[x / 16] = _mm512_mask_mov_ps(_mm512_set1_ps(kNegInf), live, v);
        nan |= _mm512_mask_cmp_ps_mask(live, v, v, _CMP_UNORD_Q);
        mx = _mm512_max_ps(mx, sv[x / 16]);
      }
      for (int x = 0; x < NV; ++x) _mm512_store_ps(&sc.s[r][16 * x], sv[x]);
      // A NaN max carries on: exp(s - NaN) and the rescale make l, o and the output NaN, as
      // in the reference; std::max keeps a NaN already in sc.m (its first argument).
      sc.m_new[r] = nan ? std::numeric_limits<float>::quiet_NaN() : std::max(sc.m[r], _mm512_reduce_max_ps(mx));
    }
    // Rescale factors of all rows in one vector: exp(m - m_new), 1 where nothing is visible yet.
    for (int r0 = 0; r0 < rows; r0 += 16) {
      const __mmask16 in = __mmask16((1u << std::min(16, rows - r0)) - 1u);
      const __m512 mo = _mm512_maskz_loadu_ps(in, sc.m + r0), mn = _mm512_maskz_loadu_ps(in, sc.m_new + r0);
      const __mmask16 none = _mm512_cmp_ps_mask(mn, _mm512_set1_ps(kNegInf), _CMP_EQ_OQ);
      _mm512_mask_storeu_ps(sc.alpha + r0, in, _mm512_mask_mov_ps(Simd::exp(_mm512_sub_ps(mo, mn)), none, _mm512_set1_ps(1.0f)));
    }
    for (int r = 0; r < rows; ++r) {
      const float m_new = sc.m_new[r];
      if (m_new == kNegInf) {  // nothing visible yet in this row
        for (int x = 0; x < CH; x += 16) _mm512_store_ps(&sc.s[r][x], _mm512_setzero_ps());
        if constexpr (Bf16Dot)
          for (int x = 0; x < CH; x += 32) _mm512_store_si512(&sc.pb[r][x], _mm512_setzero_si512());
        continue;
      }
      const __m512 mv = _mm512_set1_ps(m_new);
      __m512 sum = _mm512_mul_ps(sc.l[r], _mm512_set1_ps(sc.alpha[r]));
      for (int x = 0; x < CH; x += 32) {
        __m512 p0 = Simd::exp(_mm512_sub_ps(_mm512_load_ps(&sc.s[r][x]), mv));
        __m512 p1 = Simd::exp(_mm512_sub_ps(_mm512_load_ps(&sc.s[r][x + 16]), mv));
        if constexpr (Token) {  // P·V reads P·(V scale) in bf16, on the row's visible keys only (a
          // masked slot's scale may be NaN poison); the row sum takes P itself
          const __m512 j0 = _mm512_add_ps(iota, _mm512_set1_ps(float(x))), j1 = _mm512_add_ps(j0, _mm512_set1_ps(16.0f));
          const __m512 lo = _mm512_set1_ps(float(sc.vlo[r])), hi = _mm512_set1_ps(float(sc.vhi[r]));
          const __mmask16 l0 = _mm512_cmp_ps_mask(j0, lo, _CMP_GE_OQ) & _mm512_cmp_ps_mask(j0, hi, _CMP_LT_OQ);
          const __mmask16 l1 = _mm512_cmp_ps_mask(j1, lo, _CMP_GE_OQ) & _mm512_cmp_ps_mask(j1, hi, _CMP_LT_OQ);
          const __m512 w0 = _mm512_maskz_mul_ps(l0, p0, _mm512_load_ps(vts + x)), w1 = _mm512_maskz_mul_ps(l1, p1, _mm512_load_ps(vts + x + 16));
          _mm512_store_si512(&sc.pb[r][x], (__m512i)_mm512_cvtne2ps_pbh(w1, w0));
        } else if constexpr (Bf16Dot) {  // P·V reads P in bf16: sum the rounded values too
          const __m512i pb = (__m512i)_mm512_cvtne2ps_pbh(p1, p0);
          _mm512_store_si512(&sc.pb[r][x], pb);
          // The rounded values, in key order, for the row sum and the guarded fp32 P·V.
          p0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(pb)), 16));
          p1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(pb, 1)), 16));
        }
        _mm512_store_ps(&sc.s[r][x], p0), _mm512_store_ps(&sc.s[r][x + 16], p1);
        sum = _mm512_add_ps(_mm512_add_ps(sum, p0), p1);
      }
      sc.l[r] = sum;
      sc.m[r] = m_new;
    }
    for (int r = rows; r < rp; ++r) sc.alpha[r] = 1.0f, sc.vlo[r] = 0, sc.vhi[r] = 0;
    for (int r = rows; r < rp; ++r) {
      for (int x = 0; x < CH; x += 16) _mm512_store_ps(&sc.s[r][x], _mm512_setzero_ps());
      if constexpr (Bf16Dot)
        for (int x = 0; x < CH; x += 32) _mm512_store_si512(&sc.pb[r][x], _mm512_setzero_si512());
    }

    if constexpr (Pairs) {
      // The next chunk's V goes to L2 during this P·V (its K went during Q·Kᵀ): requests keep
      // flowing through both phases instead of bunching in one (−15 to −25 % time, bf16).
      LineStream pf;
      if (nx.v) pf.p = nx.v, pf.end = nx.v + int64_t(nx.n / 2) * vpair;
      if (guard)
        pv_pairs<T, RB, true>(sc, rp, pc.v, vpair, n / 2, d, pf);
      else
        pv_pairs<T, RB, false>(sc, rp, pc.v, vpair, n / 2, d, pf);
    } else if constexpr (Fp8Dot) {
#if ATTN_CF_VBMI
      const char* vb = reinterpret_cast<const char*>(sc.vb);
      if (guard) {
        e4m3_rows_bf16(k0 + v_off, tstride, n, d, sc.vb, fused);
        pv_chunk<KvType::bf16, RB, true>(sc, rp, vb, sizeof(sc.vb[0]), n, d);
      } else if constexpr (fused) {
        pv_chunk_dot<RB, true>(sc, rp, k0 + v_off, tstride, n, d);
      } else {
        e4m3_rows_bf16(k0 + v_off, tstride, n, d, sc.vb);
        pv_chunk_dot<RB>(sc, rp, vb, sizeof(sc.vb[0]), n, d);
      }
#endif
    } else if (Bf16Dot && !guard)
      pv_chunk_dot<RB>(sc, rp, k0 + v_off, tstride, n, d);
    else if (guard)
      pv_chunk<T, RB, true>(sc, rp, k0 + v_off, tstride, n, d);
    else
      pv_chunk<T, RB, false>(sc, rp, k0 + v_off, tstride, n, d);
    c = next;
  }

  // Undo the V order into natural order, then finish as every path does.
  alignas(64) float o[kMaxHeadSizeDecode];
  for (int r = 0; r < rows; ++r) {
    // Fused e4m3 V: the slice positions are positions of lane-order rows (e4m3_lane_elem).
    auto nat = [&](int x, int pos) { return fused ? x / 64 * 64 + e4m3_lane_elem(x % 64 + pos) : x + pos; };
    if constexpr (Pairs)  // pair P·V keeps natural order
      std::copy(sc.o[r], sc.o[r] + d, o);
    else
    for (int x = 0; x < d; x += kSlice)
      for (int i = 0; i < 16; ++i)
        o[nat(x, slice_elem<TK>(false, i))] = sc.o[r][x + i], o[nat(x, slice_elem<TK>(true, i))] = sc.o[r][x + 16 + i];
    if (it.partial >= 0) {
      float* po = partials + it.partial;
      std::copy(o, o + d, po + int64_t(r) * d);
      po[int64_t(rows) * d + r] = sc.m[r];
      po[int64_t(rows) * (d + 1) + r] = _mm512_reduce_add_ps(sc.l[r]);
    } else {
      store_out_row(a, tok0 + r / g, h * g + r % g, o, sc.m[r], _mm512_reduce_add_ps(sc.l[r]));
    }
  }
}

template <KvType T, bool Bf16Dot, bool Pairs = false, bool Token = false>
void run_item(const KernelArgs& a, const WorkItem& it, float* partials) {
  const int rows = item_rows(it, a.group);
  if (rows >= 4)
    run<T, Bf16Dot, 4, Pairs, Token>(a, it, partials);
  else if (rows >= 2)
    run<T, Bf16Dot, 2, Pairs, Token>(a, it, partials);
  else
    run<T, Bf16Dot, 1, Pairs, Token>(a, it, partials);
}

}  // namespace attn::cpu_flash::ATTN_CF_NS
