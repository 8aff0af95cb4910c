// Prefill tile phase for items whose keys all fit in one short range (a sliding window of a few
// hundred keys, the first tiles of a causal prefill): bf16 tiles on AVX-512, not AMX. Included by
// prefill_tile.avx512.cpp after store_rows, inside its anonymous namespace.
//
// The tile-by-tile loop pays per 4-row micro-tile and key tile a fixed cost (the online-softmax
// step's row maxima and rescale, O loaded and stored, a dispatch) that a 64-key tile amortizes at
// head 128 but not at gpt-oss's head 64 and window 128, where each micro-tile sees 2-3 tiles, the
// outer ones partly. Here each micro-tile instead takes its own visible range whole:
//   1. S = Q·Kᵀ over the range's 16-key vectors, in chunks of 2-4 vectors that may straddle
//      tiles (each vector has its own pointer); scaled, masked (only the vectors that cross a
//      row's first or last key) and max-reduced in registers, stored to a 4 x 256 scratch;
//   2. one exact softmax per row (no running max, no rescale), P stored as bf16;
//   3. O = P·V over the whole range with O in registers, stored once (row by row, skipping the
//      keys a row does not see, where a V tile of the range holds inf / NaN).
// Rows then go out through store_rows, as on the tile-by-tile path.

/// Widest key range (a multiple of 16) this path takes; 4 rows of its scores fit in 4 KiB.
constexpr int kShortKeys = 256;
constexpr int kShortVectors = kShortKeys / 16;

/// Where the item's bf16 q rows are: row r = (token r / g, head r % g of the group) at
/// base + token·tok_stride + head·head_stride (elements); the tile scratch as g = 1 rows of d.
struct QRows {
  const uint16_t* base;
  int g;
  int64_t tok_stride, head_stride;
  /// Micro-tile r0's first row as q pairs, and the pairs from one of its rows to the next.
  const uint32_t* pairs(int r0) const {
    return reinterpret_cast<const uint32_t*>(base + (r0 / g) * tok_stride + (r0 % g) * head_stride);
  }
  int pair_stride() const { return int(head_stride / 2); }
};

/// What one item's short-range micro-tiles share: where global key vector j's K and V live.
struct ShortRange {
  const char* base;         // packed buffer + the group's offset, at tile tile0
  int32_t tile0;
  int64_t tile_bytes, k_tile_bytes, k_scales_offset, v_scales_offset;
  bool token;
  const __m512i* k_vector(int j) const {  // pair 0 of vector j; pair i is 4 vectors further each
    return reinterpret_cast<const __m512i*>(base + int64_t(j / 4 - tile0) * tile_bytes) + j % 4;
  }
  const char* v_tile(int t) const { return base + int64_t(t - tile0) * tile_bytes + k_tile_bytes; }
  const float* k_scales(int j) const {
    return reinterpret_cast<const float*>(base + int64_t(j / 4 - tile0) * tile_bytes + k_scales_offset) + (j % 4) * 16;
  }
  const float* v_scales(int j) const {
    return reinterpret_cast<const float*>(v_tile(j / 4) + v_scales_offset) + (j % 4) * 16;
  }
};

/// Logits (scores · scale · log2(e), soft-capped, masked outside each row's keys) of rows
/// r0..r0+3 for key vectors j..j+NV−1 into s[row][16·(v + j − j_first)], and each row's running
/// 16-lane maximum in mx[row]: the epilogue runs on the accumulators while they are in registers.
template <int NV, bool Cap>
void short_qk(const Ctx& cx, const ShortRange& sr, const uint32_t* q, int ldq, int r0, int j, int j_first,
              float (*s)[kShortKeys], float (*mx)[16]) {
  __m512 acc[R][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  if (!(g_stage_mask & kSkipQk)) {
    const __m512i* kp[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) kp[v] = sr.k_vector(j + v);
    const int pairs = cx.d / 2;
#pragma GCC unroll 2
    for (int i = 0; i < pairs; ++i) {
      __m512i kv[NV];
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) kv[v] = _mm512_load_si512(kp[v] + i * 4);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v)
          acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)kv[v], (__m512bh)_mm512_set1_epi32(int(q[r * ldq + i])));
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const int32_t lo = cx.lo[r0 + r], hi = cx.hi[r0 + r];
    __m512 m = _mm512_load_ps(mx[r]);
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      __m512 t = acc[r][v];
      if (sr.token) t = _mm512_mul_ps(t, _mm512_load_ps(sr.k_scales(j + v)));  // the keys' slot scales
      t = logits<Cap>(cx, t);
      const int32_t key = 16 * (j + v);
      if (key < lo || key + 15 > hi) t = mask_outside(t, key, lo, hi);
      _mm512_store_ps(s[r] + 16 * (j + v - j_first), t);
      m = _mm512_max_ps(m, t);
    }
    _mm512_store_ps(mx[r], m);
  }
}

/// O[rows r0..r0+3, dim vectors c0..c0+C−1] = P·V over key pairs [kp0, kp1) (global pair
/// indices; P's column 0 is pair p_base).
template <int C>
void short_pv(const Ctx& cx, const ShortRange& sr, int r0, int c0, int kp0, int kp1, int p_base,
              const uint16_t (*p)[kShortKeys]) {
  __m512 acc[R][C];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  if (!(g_stage_mask & kSkipPv)) {
    const int nvd = cx.dvp / 16;
    constexpr int kTilePairs = kTileKeys / 2;
    for (int t = kp0 / kTilePairs; t * kTilePairs < kp1; ++t) {
      const __m512i* vt = reinterpret_cast<const __m512i*>(sr.v_tile(t)) + c0;
      const int b = std::max(kp0, t * kTilePairs), e = std::min(kp1, (t + 1) * kTilePairs);
#pragma GCC unroll 2
      for (int kp = b; kp < e; ++kp) {
        __m512i vv[C];
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) vv[c] = _mm512_load_si512(vt + (kp - t * kTilePairs) * nvd + c);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          uint32_t pair;
          std::memcpy(&pair, p[r] + 2 * (kp - p_base), 4);
          const __m512bh pp = (__m512bh)_mm512_set1_epi32(int(pair));
#pragma GCC unroll 16
          for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], pp, (__m512bh)vv[c]);
        }
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(cx.o + (r0 + r) * cx.dvp + (c0 + c) * 16, acc[r][c]);
}

/// One exact softmax per row of a micro-tile over its n vectors of logits: P = 2^(s − max) in
/// bf16, and the row's sum and max for store_rows (its lsum and m2).
void short_softmax(const Ctx& cx, const ShortRange& sr, int r0, int j0, int n, const float (*s)[kShortKeys],
                   const float (*mx)[16], uint16_t (*p)[kShortKeys]) {
  for (int r = 0; r < R; ++r) {
    const int row = r0 + r;
    const float m = _mm512_reduce_max_ps(_mm512_load_ps(mx[r]));
    // A row that sees none of these keys gets weight 0 everywhere: subtracting +1e30 sends its
    // −1e30 logits to exactly 0 (store_rows then writes 0, or the sink's share).
    const __m512 sub = _mm512_set1_ps(m <= 0.5f * kMasked ? -kMasked : m);
    __m512 sum = _mm512_setzero_ps();
    for (int v = 0; v < n; ++v) {
      const __m512 t = _mm512_load_ps(s[r] + 16 * v);
      const __m512 e = (g_stage_mask & kSkipSoftmax) ? t : exp2v_bf16(_mm512_sub_ps(t, sub));
      if (sr.token) {  // as in qk_softmax: P·V takes P·(V scale), the row sum P itself
        const __m512 w = _mm512_mul_ps(e, _mm512_load_ps(sr.v_scales(j0 + v)));
        _mm256_store_si256(reinterpret_cast<__m256i*>(p[r] + 16 * v), (__m256i)_mm512_cvtneps_pbh(w));
        sum = _mm512_add_ps(sum, e);
        continue;
      }
      const __m256i b = (__m256i)_mm512_cvtneps_pbh(e);
      _mm256_store_si256(reinterpret_cast<__m256i*>(p[r] + 16 * v), b);
      sum = _mm512_add_ps(sum, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16)));
    }
    _mm512_storeu_ps(cx.lsum + row * 16, sum);
    cx.m2[row] = m;
  }
}

/// Whether run_short can take an item whose tiles' keys are [kb, ke): bf16 tiles off AMX and a
/// range that fits.
bool short_range_fits(const PackLayout& L, int32_t kb, int32_t ke) {
  return L.bf16 && !L.amx && ke > kb && (ke + 15) / 16 - kb / 16 <= kShortVectors;
}

/// short_pv for micro-tiles whose range holds a V tile with inf / NaN and keys some row does not
/// see: each row adds only its own keys, so a masked key's 0 weight never meets its non-finite
/// value; pairs in the order vdpbf16ps adds them (the odd key first), so a row sums exactly as
/// short_pv does. Never taken on finite caches; written for clarity, not speed.
void short_pv_guarded(const Ctx& cx, const ShortRange& sr, int r0, int kp0, int kp1, int p_base,
                      const uint16_t (*p)[kShortKeys]) {
  constexpr int kTilePairs = kTileKeys / 2;
  for (int r = 0; r < R; ++r) {
    float* o = cx.o + (r0 + r) * cx.dvp;
    std::fill(o, o + cx.dvp, 0.0f);
    if (g_stage_mask & kSkipPv) continue;
    const int32_t lo = cx.lo[r0 + r], hi = cx.hi[r0 + r];
    for (int kp = kp0; kp < kp1; ++kp) {
      const int t = kp / kTilePairs;
      const auto* vt = reinterpret_cast<const uint16_t*>(sr.v_tile(t));
      for (int k : {2 * kp + 1, 2 * kp}) {
        if (k < lo || k > hi) continue;
        const float w = bf16_to_f32(p[r][k - 2 * p_base]);
        for (int x = 0; x < cx.dvp; ++x)
          o[x] += w * bf16_to_f32(vt[2 * (int64_t(kp - t * kTilePairs) * cx.dvp + x) + (k & 1)]);
      }
    }
  }
}

/// Every micro-tile of an item (rp rows of q at qrows, lo and hi set up by run) over its own
/// visible keys in [kb, ke); fills cx.o, cx.lsum and cx.m2 for store_rows.
void run_short(const KernelArgs& a, const PackLayout& L, const WorkItem& it, const Ctx& cx, const QRows& qrows, int rows,
               int rp, const char* group_base, int32_t tile0, int32_t kb, int32_t ke) {
  // The keys [nonfinite_lo, nonfinite_hi) span the range's V tiles that hold inf / NaN (empty: none).
  const int64_t tile_bytes = L.k_tile_bytes + L.v_tile_bytes;
  int32_t nonfinite_lo = INT32_MAX, nonfinite_hi = INT32_MIN;
  for (int32_t t = kb / kTileKeys; t * kTileKeys < ke; ++t)
    if (group_base[int64_t(t - tile0) * tile_bytes + tile_bytes - kVFlagBytes] != 0)
      nonfinite_lo = std::min(nonfinite_lo, t * kTileKeys), nonfinite_hi = t * kTileKeys + kTileKeys;
  using ShortQkFn = void (*)(const Ctx&, const ShortRange&, const uint32_t*, int, int, int, int, float (*)[kShortKeys],
                             float (*)[16]);
  using ShortPvFn = void (*)(const Ctx&, const ShortRange&, int, int, int, int, int, const uint16_t (*)[kShortKeys]);
  static constexpr std::array<std::array<ShortQkFn, 4>, 2> kQk = {{
      {{&short_qk<1, false>, &short_qk<2, false>, &short_qk<3, false>, &short_qk<4, false>}},
      {{&short_qk<1, true>, &short_qk<2, true>, &short_qk<3, true>, &short_qk<4, true>}},
  }};
  static constexpr std::array<ShortPvFn, 4> kPv = {&short_pv<1>, &short_pv<2>, &short_pv<3>, &short_pv<4>};
  const bool cap = a.soft_cap > 0;
  const ShortRange sr{group_base, tile0, tile_bytes, L.k_tile_bytes,
                      L.k_scales_offset, L.v_scales_offset, L.token};
  alignas(64) float s[R][kShortKeys];
  alignas(64) uint16_t p[R][kShortKeys];
  const int nvd = cx.dvp / 16;
  for (int r0 = 0; r0 < rp; r0 += R) {
    prefetch_rows(a, it, rows, r0, r0 + R);
    // Rows grow in position: the first row sees the earliest key, the last row the latest.
    const int32_t first = std::max(kb, cx.lo[r0]), last = std::min(ke - 1, cx.hi[r0 + R - 1]);
    if (last < first) {  // nothing visible: the rows' weights are all zero
      for (int r = r0; r < r0 + R; ++r) {
        std::fill(cx.o + int64_t(r) * cx.dvp, cx.o + int64_t(r + 1) * cx.dvp, 0.0f);
        std::fill(cx.lsum + r * 16, cx.lsum + r * 16 + 16, 0.0f);
        cx.m2[r] = kMasked;
      }
      continue;
    }
    const int j0 = first / 16, n = last / 16 - j0 + 1;
    // Chunks of at most 4 vectors, as even as they come (9 = 3+3+3): a 1-vector chunk would
    // leave the dot products waiting on their own latency.
    const int chunks = (n + 3) / 4;
    alignas(64) float mx[R][16];
    std::fill(&mx[0][0], &mx[0][0] + R * 16, kMasked);
    for (int c = 0, j = j0; c < chunks; ++c) {
      const int nv = n / chunks + (c < n % chunks ? 1 : 0);
      kQk[cap][std::size_t(nv - 1)](cx, sr, qrows.pairs(r0), qrows.pair_stride(), r0, j, j0, s, mx);
      j += nv;
    }
    short_softmax(cx, sr, r0, j0, n, s, mx, p);
    // P·V over the key pairs some row sees (P is 0 on the rest of the vectors).
    const int kp0 = first / 2, kp1 = last / 2 + 1;
    const bool guard = nonfinite_lo < 2 * kp1 && nonfinite_hi > 2 * kp0 &&
                       (cx.hi[r0] < 2 * kp1 - 1 || cx.lo[r0 + R - 1] > 2 * kp0);
    if (guard) {
      short_pv_guarded(cx, sr, r0, kp0, kp1, 8 * j0, p);
      continue;
    }
    for (int c0 = 0; c0 < nvd; c0 += 4) kPv[std::size_t(std::min(4, nvd - c0) - 1)](cx, sr, r0, c0, kp0, kp1, 8 * j0, p);
  }
}
