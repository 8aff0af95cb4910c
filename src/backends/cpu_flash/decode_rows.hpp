// cpu_flash decode kernel: the per-thread scratch and the row-cache (HND / NHD) micro-tiles:
// Q·Kᵀ with a transpose-add reduction, P·V in fp32 or on vdpbf16ps against interleaved row pairs.
// Part of the decode kernel (decode_impl.hpp), compiled once per decode build inside the
// namespace its .cpp names (ATTN_CF_NS, with ATTN_CF_VBMI 0 or 1).
#pragma once
#include "backends/cpu_flash/decode_widen.hpp"

namespace attn::cpu_flash::ATTN_CF_NS {

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
  // int4 pair caches: per row, the sum of its q (as quantized) and the chunk's P·V zero-point correction.
  float qsum[kDecodeMaxRows], vcorr[kDecodeMaxRows];
  // int8 pair caches (integer dot products): what one unit of the row's int16 q and of its int16
  // chunk weights (in pb) stands for.
  float qscale[kDecodeMaxRows], wscale[kDecodeMaxRows];
  alignas(64) float w[kMaxChunk];  // one row's fp32 chunk weights before they are quantized
  // nvfp4 / turboquant caches: the chunk's K rows and V rows unpacked (bf16 or fp32, dense).
  alignas(64) char ukv[2][kChunk * kMaxHeadSizeDecode * 4];
};

/// The calling thread's scratch: one per decode build (this namespace), not one per kernel
/// instantiation. Each of ~60 instantiations had its own, ~6 MiB of thread-local storage that
/// every thread of a program linking libattn carried (glibc carves it from the thread's stack).
inline Scratch& thread_scratch() {
  thread_local Scratch sc;
  return sc;
}

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

/// Corr: the chunk also adds the row's sc.vcorr to every dim (turboquant V: Σ P · min).
template <int RB, int NS, bool Corr = false>
inline void pv_tile_dot(Scratch& sc, int r0, const char* v0, int64_t vstride, int n, int x0) {
  __m512 acc[RB][2 * NS];
  for (int i = 0; i < RB; ++i) {
    const __m512 a = _mm512_set1_ps(sc.alpha[r0 + i]), c = _mm512_set1_ps(Corr ? sc.vcorr[r0 + i] : 0.0f);
    for (int j = 0; j < 2 * NS; ++j) {
      const __m512 o = _mm512_load_ps(&sc.o[r0 + i][x0 + 16 * j]);
      acc[i][j] = Corr ? _mm512_fmadd_ps(o, a, c) : _mm512_mul_ps(o, a);
    }
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


/// E4m3: v0 holds raw e4m3 rows (pv_tile_dot_e4m3; RB = 4, d a multiple of 64). Corr: see pv_tile_dot.
template <int RB, bool E4m3 = false, bool Corr = false>
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
      pv_tile_dot<RB, NS, Corr>(sc, r0, v0, vstride, n, x);
    }
    if constexpr (!E4m3)
      for (; x < d; x += kSlice) pv_tile_dot<RB, 1, Corr>(sc, r0, v0, vstride, n, x);
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

}  // namespace attn::cpu_flash::ATTN_CF_NS
