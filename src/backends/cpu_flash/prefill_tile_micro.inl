// Prefill tile phase, micro-kernels (see prefill_tile.avx512.cpp): what one item's micro-tiles
// share (Ctx), S = Q·Kᵀ with the online-softmax step for 4 rows (qk_softmax), O = O·alpha + P·V
// (pv), and P·V for a V tile holding inf / NaN (pv_guarded). Included by prefill_tile.avx512.cpp
// inside its anonymous namespace, after the constants (R, kMasked, kLog2e), g_stage_mask and exp2v
// that these use.

/// What the micro-kernels of one item share.
struct Ctx {
  const uint16_t* qb;  // [rows][d] bf16 (bf16 tiles)
  const float* qf;     // [rows][d] fp32 (fp32 tiles)
  int d, dvp;
  uint16_t* pb;        // [rows][64] P as bf16
  float* pf;           // [rows][64] P as fp32
  float* o;            // [rows][dvp]
  float* lsum;         // [rows][16] running sums, 16 lanes per row
  float* m2;           // [rows] running max of logit·log2(e)
  float* alpha;        // [rows] rescale of O for this tile
  const int32_t* lo;   // [rows] first visible key
  const int32_t* hi;   // [rows] last visible key
  float c;             // scale·k_scale·log2(e)
  const float* ks = nullptr;  // per-token-head bf16 tiles: this tile's 64 K scales (scores) ...
  const float* vs = nullptr;  // ... and V scales (P before its bf16 rounding); null otherwise
  const float* s = nullptr;   // AMX: [rows][64] the tile's scores, computed on the tile unit
  float cap_in, cap_out;  // soft-cap: exp2 argument factor and cap·log2(e)
};

/// Scores (already times their keys' slot scales, if any) as logits·log2(e): times the scale, or
/// soft-capped: cap·tanh(s·scale/cap) = cap·(1 − 2/(e^{2s·scale/cap} + 1)), times log2(e).
template <bool Cap>
inline __m512 logits(const Ctx& cx, __m512 t) {
  if constexpr (Cap) {
    const __m512 e = exp2v(_mm512_mul_ps(t, _mm512_set1_ps(cx.cap_in)));
    const __m512 co = _mm512_set1_ps(cx.cap_out);
    return _mm512_sub_ps(co, _mm512_div_ps(_mm512_add_ps(co, co), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
  } else {
    return _mm512_mul_ps(t, _mm512_set1_ps(cx.c));
  }
}

/// The 16 logits of keys first..first+15 with those outside [lo, hi] set to kMasked.
inline __m512 mask_outside(__m512 t, int32_t first, int32_t lo, int32_t hi) {
  const __m512i key = _mm512_add_epi32(_mm512_set1_epi32(first), _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
  const __mmask16 ok = _mm512_cmp_epi32_mask(key, _mm512_set1_epi32(lo), _MM_CMPINT_NLT) &
                       _mm512_cmp_epi32_mask(key, _mm512_set1_epi32(hi), _MM_CMPINT_LE);
  return _mm512_mask_mov_ps(_mm512_set1_ps(kMasked), ok, t);
}

/// S for rows r0..r0+3 and key vectors j0..j0+NV−1 of the tile, then the softmax step.
template <bool Bf16, int NV, bool Mask, bool Cap, bool FromS = false>
void qk_softmax(const Ctx& cx, int r0, const char* ktile, int j0, int32_t key0) {
  __m512 acc[R][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[r][v] = FromS ? _mm512_loadu_ps(cx.s + (r0 + r) * kTileKeys + (j0 + v) * 16) : _mm512_setzero_ps();
  if (!FromS && !(g_stage_mask & kSkipQk)) {
    if constexpr (Bf16) {
      const uint32_t* q = reinterpret_cast<const uint32_t*>(cx.qb) + int64_t(r0) * (cx.d / 2);
      const __m512i* kt = reinterpret_cast<const __m512i*>(ktile) + j0;
      const int pairs = cx.d / 2, ldq = cx.d / 2;
#pragma GCC unroll 2
      for (int i = 0; i < pairs; ++i) {
        __m512i kv[NV];
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) kv[v] = _mm512_load_si512(kt + i * 4 + v);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const __m512bh qp = (__m512bh)_mm512_set1_epi32(int(q[r * ldq + i]));
#pragma GCC unroll 16
          for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], qp, (__m512bh)kv[v]);
        }
      }
    } else {
      const float* q = cx.qf + int64_t(r0) * cx.d;
      const float* kt = reinterpret_cast<const float*>(ktile) + j0 * 16;
#pragma GCC unroll 2
      for (int x = 0; x < cx.d; ++x) {
        __m512 kv[NV];
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) kv[v] = _mm512_load_ps(kt + x * kTileKeys + v * 16);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const __m512 qx = _mm512_set1_ps(q[r * cx.d + x]);
#pragma GCC unroll 16
          for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(qx, kv[v], acc[r][v]);
        }
      }
    }
  }

  __m512 mx[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const int row = r0 + r;
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      __m512& t = acc[r][v];  // scores become logits·log2(e) in place
      if (cx.ks) t = _mm512_mul_ps(t, _mm512_load_ps(cx.ks + (j0 + v) * 16));  // the keys' slot scales
      t = logits<Cap>(cx, t);
      if constexpr (Mask) t = mask_outside(t, key0 + (j0 + v) * 16, cx.lo[row], cx.hi[row]);
    }
    mx[r] = acc[r][0];
#pragma GCC unroll 16
    for (int v = 1; v < NV; ++v) mx[r] = _mm512_max_ps(mx[r], acc[r][v]);
  }
  if (g_stage_mask & kSkipSoftmax) {  // measurement only: scores straight to P
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      cx.alpha[r0 + r] = 1.0f;
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) {
        if constexpr (Bf16)
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(cx.pb + (r0 + r) * kTileKeys + (j0 + v) * 16),
                              (__m256i)_mm512_cvtneps_pbh(acc[r][v]));
        else
          _mm512_storeu_ps(cx.pf + (r0 + r) * kTileKeys + (j0 + v) * 16, acc[r][v]);
      }
    }
    return;
  }
  // The 4 row maxima at once (transpose-reduce: 13 ops instead of 4 horizontal reductions),
  // then the running max, alpha and the subtrahend vectorized over the rows.
  static_assert(R == 4);
  const __m512 x01 = _mm512_max_ps(_mm512_unpacklo_ps(mx[0], mx[1]), _mm512_unpackhi_ps(mx[0], mx[1]));
  const __m512 x23 = _mm512_max_ps(_mm512_unpacklo_ps(mx[2], mx[3]), _mm512_unpackhi_ps(mx[2], mx[3]));
  __m512 z = _mm512_max_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(x01), _mm512_castps_pd(x23))),
                           _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(x01), _mm512_castps_pd(x23))));
  z = _mm512_max_ps(z, _mm512_shuffle_f32x4(z, z, 0xb1));
  z = _mm512_max_ps(z, _mm512_shuffle_f32x4(z, z, 0x4e));
  const __m128 m_old = _mm_loadu_ps(cx.m2 + r0);
  const __m128 m_new = _mm_max_ps(m_old, _mm512_castps512_ps128(z));
  // A row that has seen nothing yet keeps weight 0: subtracting +1e30 sends its −1e30 logits
  // to exactly 0, and its alpha is 2^0 = 1 (m_old = m_new = −1e30), all without a branch.
  const __m128 dead = _mm_cmp_ps(m_new, _mm_set1_ps(0.5f * kMasked), _CMP_LE_OQ);
  alignas(16) float sub[R], al[R];
  _mm_store_ps(sub, _mm_blendv_ps(m_new, _mm_set1_ps(-kMasked), dead));
  _mm_store_ps(al, _mm512_castps512_ps128(exp2v(_mm512_zextps128_ps512(_mm_sub_ps(m_old, m_new)))));
  _mm_storeu_ps(cx.m2 + r0, m_new);
  _mm_storeu_ps(cx.alpha + r0, _mm_load_ps(al));
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const int row = r0 + r;
    const __m512 mv = _mm512_set1_ps(sub[r]);
    __m512 p[NV];
    __m512 sum = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) p[v] = Bf16 ? exp2v_bf16(_mm512_sub_ps(acc[r][v], mv)) : exp2v(_mm512_sub_ps(acc[r][v], mv));
    if constexpr (Bf16) {
      // P·V multiplies P rounded to bf16, so the row sum adds the rounded values too: the weights
      // then sum to one exactly as used (a common offset in V passes through unchanged).
      uint16_t* pr = cx.pb + row * kTileKeys + j0 * 16;
      if (cx.vs) {  // per-token-head: P·V takes P·(V scale) in bf16, the row sum P itself
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) {
          const __m512 w = _mm512_mul_ps(p[v], _mm512_load_ps(cx.vs + (j0 + v) * 16));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(pr + v * 16), (__m256i)_mm512_cvtneps_pbh(w));
          sum = _mm512_add_ps(sum, p[v]);
        }
        float* ls = cx.lsum + row * 16;
        _mm512_storeu_ps(ls, _mm512_fmadd_ps(_mm512_loadu_ps(ls), _mm512_set1_ps(al[r]), sum));
        continue;
      }
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) {
        const __m256i b = (__m256i)_mm512_cvtneps_pbh(p[v]);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(pr + v * 16), b);
        sum = _mm512_add_ps(sum, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16)));
      }
    } else {
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) {
        _mm512_storeu_ps(cx.pf + row * kTileKeys + (j0 + v) * 16, p[v]);
        sum = _mm512_add_ps(sum, p[v]);
      }
    }
    float* ls = cx.lsum + row * 16;
    _mm512_storeu_ps(ls, _mm512_fmadd_ps(_mm512_loadu_ps(ls), _mm512_set1_ps(al[r]), sum));
  }
}

/// O[rows r0..r0+3, dim vectors c0..c0+C−1] = O·alpha + P·V over keys [k0, k1) of the tile (k0, k1 even).
template <bool Bf16, int C>
void pv(const Ctx& cx, int r0, const char* vtile, int c0, int k0, int k1) {
  __m512 acc[R][C];
  // Once the row maxima settle, alpha is exactly 1 for most tiles: skip the multiplies, which
  // compete with the dot products for the same ports.
  const bool rescale = _mm_movemask_ps(_mm_cmpneq_ps(_mm_loadu_ps(cx.alpha + r0), _mm_set1_ps(1.0f))) != 0;
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const __m512 al = _mm512_set1_ps(cx.alpha[r0 + r]);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      acc[r][c] = _mm512_loadu_ps(cx.o + (r0 + r) * cx.dvp + (c0 + c) * 16);
      if (rescale) acc[r][c] = _mm512_mul_ps(acc[r][c], al);
    }
  }
  if (!(g_stage_mask & kSkipPv)) {
    if constexpr (Bf16) {
      const int nvd = cx.dvp / 16;
      const __m512i* vt = reinterpret_cast<const __m512i*>(vtile) + c0;
      const uint32_t* p = reinterpret_cast<const uint32_t*>(cx.pb) + r0 * (kTileKeys / 2);
#pragma GCC unroll 2
      for (int kp = k0 / 2; kp < k1 / 2; ++kp) {
        __m512i vv[C];
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) vv[c] = _mm512_load_si512(vt + kp * nvd + c);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const __m512bh pp = (__m512bh)_mm512_set1_epi32(int(p[r * (kTileKeys / 2) + kp]));
#pragma GCC unroll 16
          for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], pp, (__m512bh)vv[c]);
        }
      }
    } else {
      const float* vt = reinterpret_cast<const float*>(vtile) + c0 * 16;
      const float* p = cx.pf + r0 * kTileKeys;
#pragma GCC unroll 2
      for (int k = k0; k < k1; ++k) {
        __m512 vv[C];
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) vv[c] = _mm512_load_ps(vt + k * cx.dvp + c * 16);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const __m512 pk = _mm512_set1_ps(p[r * kTileKeys + k]);
#pragma GCC unroll 16
          for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(pk, vv[c], acc[r][c]);
        }
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(cx.o + (r0 + r) * cx.dvp + (c0 + c) * 16, acc[r][c]);
}

/// pv for a partly masked micro-tile whose V tile holds a NaN or an infinity: each row adds only
/// the keys it sees, so a masked key's 0 weight never meets its non-finite value. Never taken
/// on finite caches; written for clarity, not speed.
template <bool Bf16>
void pv_guarded(const Ctx& cx, int r0, const char* vtile, int32_t key0, int k0, int k1) {
  for (int r = r0; r < r0 + R; ++r) {
    float* o = cx.o + r * cx.dvp;
    if (cx.alpha[r] != 1.0f)
      for (int x = 0; x < cx.dvp; ++x) o[x] *= cx.alpha[r];
    const int kb = std::max(k0, cx.lo[r] - key0), ke = std::min(k1, cx.hi[r] - key0 + 1);
    if constexpr (Bf16) {
      // Key pairs in the order vdpbf16ps adds them, the odd key first, so a row sums exactly
      // as on the unguarded path (a bf16 product is exact in fp32: only the order of adds rounds).
      const uint16_t* vt = reinterpret_cast<const uint16_t*>(vtile);
      for (int kp = k0 / 2; kp < k1 / 2; ++kp)
        for (int k : {2 * kp + 1, 2 * kp}) {
          if (k < kb || k >= ke) continue;
          const float p = bf16_to_f32(cx.pb[r * kTileKeys + k]);
          for (int x = 0; x < cx.dvp; ++x) o[x] += p * bf16_to_f32(vt[2 * (int64_t(kp) * cx.dvp + x) + (k & 1)]);
        }
    } else {
      const float* vt = reinterpret_cast<const float*>(vtile);
      for (int k = kb; k < ke; ++k) {
        const float p = cx.pf[r * kTileKeys + k];
        for (int x = 0; x < cx.dvp; ++x) o[x] += p * vt[int64_t(k) * cx.dvp + x];
      }
    }
  }
}
