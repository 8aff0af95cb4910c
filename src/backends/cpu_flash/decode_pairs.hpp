// cpu_flash decode kernel: the HND_PAIRS micro-tiles: scores accumulated in lanes against
// broadcast q pairs, P·V against V lines as stored, the chunk walk and its L2 prefetch streams.
// Part of the decode kernel (decode_impl.hpp), compiled once per decode build inside the
// namespace its .cpp names (ATTN_CF_NS, with ATTN_CF_VBMI 0 or 1).
#pragma once
#include "backends/cpu_flash/decode_rows.hpp"

#include <type_traits>

namespace attn::cpu_flash::ATTN_CF_NS {

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
inline PairChunk pair_chunk_at(const char* run_k, int64_t v_off, int64_t vpair, int32_t c, int32_t end, int bs, int64_t key_bytes) {
  const int32_t off = c % bs;
  const int n = std::min<int32_t>({kPairChunk, bs - off, (end - c + 15) / 16 * 16});
  return {run_k + int64_t(off) * key_bytes, run_k + v_off + int64_t(off / 2) * vpair, n};
}

/// Bytes one key takes in a K pair line (one dim pair): 2 values, or one byte of two int4 codes.
template <KvType T>
constexpr int64_t pair_key_bytes() { return T == KvType::i4 ? 1 : 2 * kv_bytes<T>(); }

/// A pair line's bytes of the chunk as bf16 operand vectors: one vector per 16 keys (K) or per
/// 16 dims (V). bf16: NL lines as they are; fp8 (VBMI builds): NL·32 bytes (64-byte lines, the
/// last one half for odd NL) widened exactly by the byte tables, natural order.
template <KvType T, int NL>
inline void pair_lines(const char* p, __m512i* out) {
  if constexpr (T == KvType::bf16) {
    for (int l = 0; l < NL; ++l) out[l] = _mm512_loadu_si512(p + 64 * l);
  } else {
#if ATTN_CF_VBMI
    const E4m3Lut t(T == KvType::e4m3 ? kE4m3Table : kE5m2Table);
    for (int l = 0; l < NL; l += 2) {
      __m512i a0, a1;
      const __m512i raw = l + 1 < NL ? _mm512_loadu_si512(p + 32 * l) : _mm512_maskz_loadu_epi8(0xffffffffu, p + 32 * l);
      const __m512i x = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 4, 1, 5, 2, 6, 3, 7), raw);
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
  __m512 acc[NA][RB][NL];
  for (auto& x : acc)
    for (auto& y : x)
      for (auto& z : y) z = _mm512_setzero_ps();
  const int64_t nx_bytes = int64_t(nx.n) * pair_key_bytes<T>();  // K bytes of one dim pair = V bytes per dim pair
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

/// f(std::integral_constant<int, NL>{}) for a chunk of n keys (16, 32, 48 or 64: NL whole K lines),
/// so a tile routine gets its line count as a template argument.
template <class F>
inline void with_pair_lines(int n, F&& f) {
  switch (n / 16) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    default: return f(std::integral_constant<int, 4>{});
  }
}

/// qk_pairs for a chunk of n keys (16, 32, 48 or 64: whole K lines).
template <KvType T, int RB>
inline void qk_pairs_n(Scratch& sc, int r0, const char* k, int64_t kpair, int d, int n, const PairChunk& nx, int64_t nx_kpair, bool pf_v) {
  with_pair_lines(n, [&](auto nl) { qk_pairs<T, RB, decltype(nl)::value>(sc, r0, k, kpair, d, nx, nx_kpair, pf_v); });
}

/// O[RB rows, dims x0 .. x0 + 16·NC) = O·alpha + P·V over the chunk's key pairs: one V line
/// (2 keys × 16 dims) per vdpbf16ps against the row's broadcast P pair (P in natural dim order).
/// Guard: a row sees only [vlo, vhi) of the chunk; a pair it half sees has the other key's values
/// zeroed (0·NaN would be NaN), a pair it does not see is skipped.
template <KvType T, int RB, int NC, bool Guard>
inline void pv_pairs_tile(Scratch& sc, int r0, const char* v, int64_t vpair, int npairs, int x0, LineStream& pf) {
  // bf16 vectors per 64-byte line (no more than the tile's columns)
  constexpr int LB = std::min(NC, T == KvType::bf16 ? 1 : 2);
  __m512 acc[RB][NC];
  for (int i = 0; i < RB; ++i) {
    const __m512 al = _mm512_set1_ps(sc.alpha[r0 + i]);
    for (int j = 0; j < NC; ++j) acc[i][j] = _mm512_mul_ps(_mm512_load_ps(&sc.o[r0 + i][x0 + 16 * j]), al);
  }
  const char* row = v + int64_t(x0) * pair_key_bytes<T>();  // a dim of a key pair: 2 values
  for (int p = 0; p < npairs; ++p, row += vpair) {
    pf.step();
    __m512i vv[NC];
    for (int j = 0; j < NC; j += LB) pair_lines<T, LB>(row + 16 * j * pair_key_bytes<T>(), vv + j);
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

/// The P·V tiles of rows [0, rp) over d dims: f(r0, x0, std::integral_constant<int, NC>{}, pf) for
/// NC-wide tiles (RB·NC ≤ 16 accumulators, the V lines of a step beside them), then 32-dim ones;
/// pf (the next chunk's lines) spread over every pair step of every tile.
template <int RB, class F>
inline void for_pv_tiles(int rp, int d, int npairs, LineStream& pf, F&& f) {
  constexpr int NC = RB == 4 ? 4 : 8;
  const int steps = rp / RB * (d / (16 * NC) + d % (16 * NC) / 32) * npairs;
  if (pf.p && steps > 0) pf.per_step = int(((pf.end - pf.p) / 64 + steps - 1) / steps);
  for (int r0 = 0; r0 < rp; r0 += RB) {
    int x = 0;
    for (; x + 16 * NC <= d; x += 16 * NC) f(r0, x, std::integral_constant<int, NC>{}, pf);
    for (; x < d; x += 32) f(r0, x, std::integral_constant<int, 2>{}, pf);
  }
}

template <KvType T, int RB, bool Guard>
inline void pv_pairs(Scratch& sc, int rp, const char* v, int64_t vpair, int npairs, int d, LineStream pf = {}) {
  for_pv_tiles<RB>(rp, d, npairs, pf, [&](int r0, int x, auto nc, LineStream& s) {
    pv_pairs_tile<T, RB, decltype(nc)::value, Guard>(sc, r0, v, vpair, npairs, x, s);
  });
}

}  // namespace attn::cpu_flash::ATTN_CF_NS
