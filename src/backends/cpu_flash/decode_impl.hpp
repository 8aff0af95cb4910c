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
//  - int8 and int4 per-token-head pair caches run both products on vpdpwssd instead: codes
//    widen to int16, q and each chunk's weights are quantized to int16 per row (decode_int_dot.hpp);
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
// The pieces, each included by the next: decode_widen.hpp (conversions), decode_rows.hpp (row
// caches), decode_pairs.hpp (HND_PAIRS), decode_chunk.hpp (a chunk's unpacked rows and per-key
// scales), decode_int_dot.hpp (int8 / int4 codes on integer dot products); this file holds the item loop
// (run) over them.
#pragma once
#include "backends/cpu_flash/decode_int_dot.hpp"
#include "backends/cpu_flash/hadamard_simd.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace attn::cpu_flash::ATTN_CF_NS {

inline void prefetch_l2(const char* p, int64_t bytes) {
  for (int64_t off = 0; off < bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T1);
}

/// Pairs: the cache is HND_PAIRS (T = bf16 with Bf16Dot; qk_pairs / pv_pairs, P·V in natural
/// dim order); otherwise rows (HND / NHD). Token: a per-token-head cache (pairs only): each key's
/// K scale multiplies its score, its V scale its weight P before P is rounded to bf16 (the row
/// sums take P unscaled). U: the cache's rows are unpacked per chunk into scratch rows of type T
/// (see Unpack), which the chunk's products then read; the cache is addressed in bytes.
template <KvType T, bool Bf16Dot, int RB, bool Pairs = false, bool Token = false, Unpack U = Unpack::none>
void run(const KernelArgs& a, const WorkItem& it, float* partials) {
  static_assert(!Pairs || (Bf16Dot && (T == KvType::bf16 || T == KvType::i4 || T == KvType::i8 || (ATTN_CF_VBMI && (T == KvType::e4m3 || T == KvType::e5m2)))),
                "the pair kernel reads bf16, int8 and int4 caches (and fp8 ones on VBMI builds) with bf16 q");
  static_assert(!Token || Pairs, "per-token-head scales are read by the pair kernel");
  static_assert((T != KvType::i8 && T != KvType::i4) || Token, "int8 and int4 codes come with per-token-head scales");
  static_assert(T != KvType::i4 || Pairs, "int4 rows are read by the general kernel");
  constexpr bool Unpacked = U != Unpack::none;
  static_assert(!Unpacked || (!Pairs && !Token &&
                               (U == Unpack::nvfp4 ? T == KvType::bf16
                                                   : T == KvType::f32 || (T == KvType::e4m3 && Bf16Dot && ATTN_CF_VBMI))),
                "nvfp4 unpacks to bf16 rows, turboquant to fp32 rows (e4m3 keys with bf16 q: read in place), both row caches");
  // int4 (rotated vectors): q is rotated once per row and the output rotated back; a score is
  // A·(q·k' − Σq·B) with q·k' = Σ q·(1 + c/16) over the key's codes c, A = 16 · scale · softmax
  // scale and B = 1 + z/16, and P·V takes Σ w'·(1 + z/16) back out of every dim of
  // Σ w'·(1 + c/16), w' = 16 · P · V scale (the integer products give Σ q·c, Σ w'·c: decode_int_dot.hpp).
  constexpr bool Int4 = T == KvType::i4;
  constexpr bool IntDot = T == KvType::i8 || Int4;  // integer dot products (decode_int_dot.hpp)
  constexpr int KB = 16 / RB;
  constexpr int CH = Pairs ? kPairChunk : kChunk, NV = CH / 16;  // keys per online-softmax step
  // e4m3 rows with dot products (VBMI builds only): 4-row tiles widen K and V in registers
  // (fused, below); smaller tiles convert each chunk to bf16 rows in scratch and then run exactly
  // as a bf16 cache does (TK is the type the products see). Pair caches widen in pair_lines.
  constexpr bool Fp8Dot = Bf16Dot && T == KvType::e4m3 && !Pairs;
  static_assert(!Fp8Dot || ATTN_CF_VBMI, "e4m3 dot products need the VBMI table lookups");
  constexpr KvType TK = Fp8Dot ? KvType::bf16 : T;
  // turboquant with bf16 q (Bf16Dot): Q·Kᵀ stays fp32 on the unpacked keys (centroids are not
  // bf16 values; a bf16 rounding of the keys measured errors beyond the bf16 tolerance), while
  // P·V runs on vdpbf16ps against the V codes, which bf16 holds exactly: v = code · scale + min,
  // so a row's chunk adds Σ (P · scale)·code over bf16 weights plus Σ P · min to every dim.
  // turboquant_k8v4 with bf16 q (T = e4m3, VBMI builds): the slot's keys are plain e4m3 rows, read
  // in place by the e4m3 dot products as an fp8 row cache's are; only the values are unpacked.
  constexpr bool Tq = U == Unpack::turboquant, TqV = Tq && Bf16Dot, TqKeysInPlace = Tq && T == KvType::e4m3;
  constexpr bool KDot = Bf16Dot && !(Tq && T == KvType::f32);  // Q·Kᵀ on vdpbf16ps (bf16 q); P·V is whenever Bf16Dot
  constexpr KvType TV = TqV ? KvType::bf16 : TK;  // the type P·V reads (its output slice order)
  Scratch& sc = thread_scratch();
  const int g = a.group, d = a.head_size, rows = item_rows(it, g), rp = (rows + RB - 1) / RB * RB;
  const int s_idx = it.seq, h = it.kv_head, bs = a.kv.block_size;
  // eb: bytes per cache element (unpacked formats: the cache is addressed in bytes); row_bytes,
  // vrow_bytes: what one K / V row occupies in the cache.
  const int64_t eb = Unpacked ? 1 : kv_bytes<T>(), tstride = a.kv.token_stride * eb;
  const int64_t row_bytes = U == Unpack::nvfp4        ? nvfp4::row_bytes(d)
                            : U == Unpack::turboquant ? turboquant::key_bytes(a.kv.tq, d)
                                                      : int64_t(d) * eb;
  const int64_t vrow_bytes = U == Unpack::turboquant ? turboquant::value_bytes(a.kv.tq, d) : row_bytes;
  const TqCentroids tqc = U == Unpack::turboquant ? TqCentroids(d, a.kv.tq) : TqCentroids();  // looked up once per item
  // Unpacked chunks: K rows then V rows in scratch, one dense row of T per key.
  const int64_t upitch = int64_t(d) * kv_bytes<T>();
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
    for (int j = j0; j < std::min(j1, n); ++j) prefetch_l2(k + j * tstride, row_bytes), prefetch_l2(k + j * tstride + v_off, vrow_bytes);
  };
  // HND_PAIRS: K dim pairs 2·bs elements apart (int4: bs bytes), V key pairs 2·w (w = token_stride, the width).
  constexpr int64_t key_bytes = pair_key_bytes<T>();
  const int64_t kpair = int64_t(bs) * key_bytes, vpair = 2 * a.kv.token_stride * eb;
  auto pair_chunk = [&](int32_t c) -> PairChunk {
    if (c >= it.kv_end) return {};
    const char* run_k = base + (int64_t(bt[c / bs]) * a.kv.block_stride + int64_t(h) * a.kv.head_stride) * eb;
    return pair_chunk_at(run_k, v_off, vpair, c, it.kv_end, bs, key_bytes);
  };
  if constexpr (Pairs) {
    const PairChunk f = pair_chunk(it.kv_begin - it.kv_begin % 16);
    for (int dp = 0; dp < d / 2; ++dp) prefetch_l2(f.k + dp * kpair, f.n * key_bytes);
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
    if (r < rows) {
      load_row(a.q, a.q_dtype, e, d, nat);
      if constexpr (Int4) int4_head::rotate_query(nat, d, a.q_dtype, &hadamard_simd);
      // turboquant keys live in the orthonormal rotated space: q·k = (H·q / √d)·k' (fp32, as vLLM's q_rot)
      if constexpr (U == Unpack::turboquant)
        if (!a.kv.tq.key_fp8()) turboquant::rotate(nat, d, &hadamard_simd);
    } else {
      std::fill(nat, nat + d, 0.0f);
    }
    for (int x = 0; x < d; x += kSlice) {
      if constexpr (fused) {  // q in the lane order the fused e4m3 widening gives K
        if (x % 64 == 0)
          for (int p = 0; p < 64; ++p) sc.qb[r][x + p] = f32_to_bf16(nat[x + e4m3_lane_elem(p)]);
      } else if constexpr (IntDot) {  // int16 q and its scale, once for the row
        if (x == 0) sc.qscale[r] = quantize_int16(nat, d, sc.qb[r]);
      } else if constexpr (KDot) {  // exact: the dot kernels serve bf16 q only
        const __m512i b = _mm512_castsi256_si512(bf16_rne(_mm512_load_ps(nat + x)));
        _mm512_store_si512(&sc.qb[r][x], _mm512_inserti64x4(b, bf16_rne(_mm512_load_ps(nat + x + 16)), 1));
      } else if (Tq && tq_key_even_odd(a.kv.tq, d)) {  // the order 4-bit turboquant keys unpack to
        for (int i = 0; i < 16; ++i) sc.q[r][x + i] = nat[x + 2 * i], sc.q[r][x + 16 + i] = nat[x + 2 * i + 1];
      } else {  // fp32 q in the order K rows widen to: lo half at [x, x+16), hi at [x+16, x+32)
        for (int i = 0; i < 16; ++i) sc.q[r][x + i] = nat[x + slice_elem<T>(false, i)], sc.q[r][x + 16 + i] = nat[x + slice_elem<T>(true, i)];
      }
    }
    sc.m[r] = kNegInf, sc.l[r] = _mm512_setzero_ps(), sc.alpha[r] = 1.0f;
    if constexpr (Int4) {  // Σ of the int16 q the products see
      int64_t sum = 0;
      for (int x = 0; x < d; ++x) sum += int16_t(sc.qb[r][x]);
      sc.qsum[r] = float(sum) * sc.qscale[r];
    }
  }
  for (int r = 0; r < rp; ++r) std::fill(sc.o[r], sc.o[r] + d, 0.0f);

  const int32_t qlen = a.query_start_loc[s_idx + 1] - a.query_start_loc[s_idx];
  const int32_t first_pos = a.seq_lens[s_idx] - qlen + it.q_begin;
  const float sscale = a.scale * a.kv.k_scales[h] * (T == KvType::e4m3 ? kE4m3Rebias : 1.0f) / (Int4 ? float(d) : 1.0f);
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
    alignas(64) float kf[kChunk];  // turboquant: each key's factor (its score takes it)
    // int4: kzb / vzb the zero points' factors; turboquant: vts / vzb each key's V scale and minimum.
    alignas(64) float kts[kPairChunk], vts[kPairChunk], kzb[Int4 ? kPairChunk : 1], vzb[Int4 || Tq ? kPairChunk : 1];
    if constexpr (Unpacked) {
      unpack_chunk<U, TqV, !TqKeysInPlace>(a, tqc, k0, tstride, v_off, n, d, sc.ukv[0], sc.ukv[1], kf, vts, vzb);
      if constexpr (!TqKeysInPlace) kq = sc.ukv[0], kqs = upitch;
    }
    // The rows P·V reads (row caches): the cache's V rows, or the unpacked ones.
    const char* vq = Unpacked ? sc.ukv[1] : k0 + v_off;
    const int64_t vqs = TqV ? int64_t(d) * 2 : Unpacked ? upitch : tstride;
    for (int j = 0; j < kChunk + 16; ++j) kp[j] = kq + std::min(j, n - 1) * kqs;  // padding repeats a real row
    const int32_t next = c + n;
    // Token: this chunk's K scales (times the softmax scale) and V scales, one vector per 16 keys.
    chunk_scales<T, Token, U>(a, bt, c, h, n, sscale, kf, kts, vts, kzb, vzb);

    PairChunk nx{};
    if constexpr (Pairs) {
      nx = pair_chunk(next);
      const PairChunk none{};
      for (int r0 = 0; r0 < rp; r0 += RB)
        if constexpr (IntDot)
          with_pair_lines(n, [&](auto nl) { qk_pairs_int<T, RB, decltype(nl)::value>(sc, r0, k0, kpair, d, r0 == 0 ? nx : none, kpair, false); });
        else
          qk_pairs_n<T, RB>(sc, r0, k0, kpair, d, n, r0 == 0 ? nx : none, kpair, false);
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
          qk_tile<TK, KDot, RB, KB>(sc, r0, kp + j0, d, &sc.s[r0][j0]);
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
        __m512 v = _mm512_load_ps(&sc.s[r][x]);
        if constexpr (Int4) v = _mm512_fnmadd_ps(_mm512_set1_ps(sc.qsum[r]), _mm512_load_ps(kzb + x), v);  // q·k' − Σq·B
        v = _mm512_mul_ps(v, Token || U == Unpack::turboquant ? _mm512_load_ps(kts + x) : _mm512_set1_ps(sscale));
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
    for (int r = 0; r < rp; ++r) sc.vcorr[r] = 0.0f;
    for (int r = 0; r < rows; ++r) {
      const float m_new = sc.m_new[r];
      if (m_new == kNegInf) {  // nothing visible yet in this row
        for (int x = 0; x < CH; x += 16) _mm512_store_ps(&sc.s[r][x], _mm512_setzero_ps());
        if constexpr (Bf16Dot)
          for (int x = 0; x < CH; x += 32) _mm512_store_si512(&sc.pb[r][x], _mm512_setzero_si512());
        sc.wscale[r] = 0.0f;
        continue;
      }
      const __m512 mv = _mm512_set1_ps(m_new);
      __m512 sum = _mm512_mul_ps(sc.l[r], _mm512_set1_ps(sc.alpha[r]));
      for (int x = 0; x < CH; x += 32) {
        __m512 p0 = Simd::exp(_mm512_sub_ps(_mm512_load_ps(&sc.s[r][x]), mv));
        __m512 p1 = Simd::exp(_mm512_sub_ps(_mm512_load_ps(&sc.s[r][x + 16]), mv));
        if constexpr (Token || TqV) {  // P·V reads P·(V scale) in bf16, on the row's visible keys only
          // (a masked slot's scale may be NaN poison); the row sum takes P itself
          const __m512 j0 = _mm512_add_ps(iota, _mm512_set1_ps(float(x))), j1 = _mm512_add_ps(j0, _mm512_set1_ps(16.0f));
          const __m512 lo = _mm512_set1_ps(float(sc.vlo[r])), hi = _mm512_set1_ps(float(sc.vhi[r]));
          const __mmask16 l0 = _mm512_cmp_ps_mask(j0, lo, _CMP_GE_OQ) & _mm512_cmp_ps_mask(j0, hi, _CMP_LT_OQ);
          const __mmask16 l1 = _mm512_cmp_ps_mask(j1, lo, _CMP_GE_OQ) & _mm512_cmp_ps_mask(j1, hi, _CMP_LT_OQ);
          const __m512 w0 = _mm512_maskz_mul_ps(l0, p0, _mm512_load_ps(vts + x)), w1 = _mm512_maskz_mul_ps(l1, p1, _mm512_load_ps(vts + x + 16));
          if constexpr (IntDot) {  // fp32 weights here, quantized to int16 once the chunk's are known
            _mm512_store_ps(&sc.w[x], w0), _mm512_store_ps(&sc.w[x + 16], w1);
            if (x + 32 == CH) {
              sc.wscale[r] = quantize_int16(sc.w, CH, sc.pb[r]);
              if constexpr (Int4) sc.vcorr[r] = zero_point_correction<CH>(sc.pb[r], sc.wscale[r], vzb);
            }
          } else {
            _mm512_store_si512(&sc.pb[r][x], (__m512i)_mm512_cvtne2ps_pbh(w1, w0));
            if constexpr (TqV)  // Σ P · min over the visible keys, which P·V adds to every dim
              sc.vcorr[r] += _mm512_reduce_add_ps(_mm512_add_ps(_mm512_maskz_mul_ps(l0, p0, _mm512_load_ps(vzb + x)),
                                                                _mm512_maskz_mul_ps(l1, p1, _mm512_load_ps(vzb + x + 16))));
          }
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
    for (int r = rows; r < rp; ++r) sc.alpha[r] = 1.0f, sc.wscale[r] = 0.0f, sc.vlo[r] = 0, sc.vhi[r] = 0;
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
      if constexpr (IntDot)  // keys a row does not see weigh 0 against finite codes: no guard
        pv_pairs_int<T, RB>(sc, rp, pc.v, vpair, n / 2, d, pf);
      else if (guard)
        pv_pairs<T, RB, true>(sc, rp, pc.v, vpair, n / 2, d, pf);
      else
        pv_pairs<T, RB, false>(sc, rp, pc.v, vpair, n / 2, d, pf);
    } else if constexpr (TqV) {  // finite codes: keys a row does not see weigh 0, no guard
      pv_chunk_dot<RB, false, true>(sc, rp, vq, vqs, n, d);
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
      pv_chunk_dot<RB>(sc, rp, vq, vqs, n, d);
    else if (guard)
      pv_chunk<T, RB, true>(sc, rp, vq, vqs, n, d);
    else
      pv_chunk<T, RB, false>(sc, rp, vq, vqs, n, d);
    c = next;
  }

  // Undo the V order into natural order, then finish as every path does.
  alignas(64) float o[kMaxHeadSizeDecode];
  for (int r = 0; r < rows; ++r) {
    // Fused e4m3 V: the slice positions are positions of lane-order rows (e4m3_lane_elem).
    auto nat = [&](int x, int pos) { return fused && !TqV ? x / 64 * 64 + e4m3_lane_elem(x % 64 + pos) : x + pos; };
    if constexpr (Pairs) {  // pair P·V keeps natural order
      std::copy(sc.o[r], sc.o[r] + d, o);
      if constexpr (Int4) int4_head::unrotate(o, d, &hadamard_simd);  // linear: before the normalization and merges
    } else
    for (int x = 0; x < d; x += kSlice)
      for (int i = 0; i < 16; ++i)
        o[nat(x, slice_elem<TV>(false, i))] = sc.o[r][x + i], o[nat(x, slice_elem<TV>(true, i))] = sc.o[r][x + 16 + i];
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

template <KvType T, bool Bf16Dot, bool Pairs = false, bool Token = false, Unpack U = Unpack::none>
void run_item(const KernelArgs& a, const WorkItem& it, float* partials) {
  const int rows = item_rows(it, a.group);
  if (rows >= 4)
    run<T, Bf16Dot, 4, Pairs, Token, U>(a, it, partials);
  else if (rows >= 2)
    run<T, Bf16Dot, 2, Pairs, Token, U>(a, it, partials);
  else
    run<T, Bf16Dot, 1, Pairs, Token, U>(a, it, partials);
}

}  // namespace attn::cpu_flash::ATTN_CF_NS
