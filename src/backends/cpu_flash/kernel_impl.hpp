#pragma once
/// The cpu_flash kernel, written once over a vector-traits class `Simd` and compiled per ISA:
/// each *.avx512.cpp / *.avx2.cpp / portable .cpp defines ATTN_CF_NS, includes its simd_*.hpp
/// and then this file, so every function here lives in that ISA's own namespace (no ODR mixing
/// of code built with different -m flags).
///
/// One work item = one query tile (all q heads of one KV head, token-major rows) against a KV
/// range. Per 32-key chunk: S = Q·Kᵀ in register micro-tiles (each K row is read once for all
/// rows of the tile, i.e. once for the whole GQA group), scale / soft-cap / ALiBi / mask, online
/// softmax, then O = O·alpha + P·V, again in register micro-tiles. K and V are dequantized in
/// registers as they are loaded; fp32 accumulation throughout.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "attn/numeric.hpp"
#include "attn/tensor.hpp"
#include "backends/cpu_flash/head_sizes.hpp"
#include "backends/cpu_flash/hadamard_simd.hpp"
#include "backends/cpu_flash/int4_unpack.hpp"
#include "backends/cpu_flash/nvfp4_unpack.hpp"
#include "backends/cpu_flash/turboquant_unpack.hpp"
#include "backends/cpu_flash/kernel_args.hpp"
#include "cpu/prefetch.hpp"

namespace attn::cpu_flash::ATTN_CF_NS {

/// Keys per online-softmax step: 32 keys × 64 rows of logits (8 KiB) stay in L1.
constexpr int kChunk = 32;
/// Q rows are padded to a multiple of 32 elements (the bf16 dot step), zeros in the padding.
constexpr int kQAlign = 32;

inline int round_up(int x, int m) { return (x + m - 1) / m * m; }

/// The query tile: fp32 rows, plus bf16 rows when the Q·Kᵀ policy uses bf16 dot products, or
/// int16 rows and their scales when it uses integer ones.
struct QTile {
  const float* f = nullptr;
  const uint16_t* b = nullptr;
  int ld = 0;  // elements per row (every copy)
  const int16_t* i = nullptr;
  const float* iscale = nullptr;
};

/// A Q·Kᵀ policy on integer dot products (kernel_int_dot_avx2.hpp) quantizes q once per item
/// (Qk::quantize_q) and takes P·V too (Qk::pv), on int16 weights.
template <class Qk>
concept IntDot = requires { Qk::kIntDot; };

/// Q·Kᵀ policy: fp32 FMA on K dequantized in registers. RB rows × KB keys per micro-tile
/// (RB·KB = Simd::kAcc accumulators), reduced with one transpose-add tree.
struct QkF32 {
  static constexpr bool kNeedsBf16 = false;

  template <class S, KvType T, int RB, int KB, bool Tail>
  static void step(typename S::F* acc, const QTile& q, int r0, const void* const* k, int x, int d) {
    using F = typename S::F;
    F kv[KB];
    for (int j = 0; j < KB; ++j) {
      const void* p = static_cast<const char*>(k[j]) + int64_t(x) * kv_bytes<T>();
      kv[j] = Tail ? S::template load_kv_tail<T>(p, d - x) : S::template load_kv<T>(p);
    }
    for (int i = 0; i < RB; ++i) {
      const F qv = S::in_register(S::loadu(q.f + int64_t(r0 + i) * q.ld + x));
      for (int j = 0; j < KB; ++j) acc[i * KB + j] = S::fma(qv, kv[j], acc[i * KB + j]);
    }
  }

  template <class S, KvType T, int RB, int KB>
  static void block(const QTile& q, int r0, const void* const* k, int d, float* s, int lds) {
    typename S::F acc[RB * KB];
    for (auto& a : acc) a = S::zero();
    int x = 0;
    for (; x + S::W <= d; x += S::W) step<S, T, RB, KB, false>(acc, q, r0, k, x, d);
    if (x < d) step<S, T, RB, KB, true>(acc, q, r0, k, x, d);
    float sums[S::kAcc];
    S::reduce(acc, sums);
    for (int i = 0; i < RB; ++i)
      for (int j = 0; j < KB; ++j) s[i * lds + j] = sums[i * KB + j];
  }
};

/// Visible keys of each row in the current chunk, [lo, hi); null when every row sees all keys.
/// Masked keys are skipped in P·V rather than weighted by 0, since 0·NaN = NaN.
struct RowSpans {
  const int* lo = nullptr;
  const int* hi = nullptr;
};

/// O[RB rows, DC vectors from column c0] = O·alpha + P·V over n keys.
template <class S, KvType T, int RB, int DC, bool Tail>
void pv_block(float* o, int ldo, const float* alpha, const float* p, int ldp, const void* const* v, int n, int c0,
              int tail_n, RowSpans spans) {
  using F = typename S::F;
  F acc[RB * DC];
  for (int i = 0; i < RB; ++i) {
    const F a = S::set1(alpha[i]);
    for (int j = 0; j < DC; ++j) acc[i * DC + j] = S::mul(S::loadu(o + int64_t(i) * ldo + c0 + j * S::W), a);
  }
  for (int t = 0; t < n; ++t) {
    const char* row = static_cast<const char*>(v[t]) + int64_t(c0) * kv_bytes<T>();
    F vv[DC];
    for (int j = 0; j < DC; ++j) {
      const char* pj = row + j * S::W * kv_bytes<T>();
      vv[j] = (Tail && j == DC - 1) ? S::template load_kv_tail<T>(pj, tail_n) : S::template load_kv<T>(pj);
    }
    for (int i = 0; i < RB; ++i) {
      if (spans.lo && (t < spans.lo[i] || t >= spans.hi[i])) continue;
      const F pb = S::set1(p[i * ldp + t]);
      for (int j = 0; j < DC; ++j) acc[i * DC + j] = S::fma(pb, vv[j], acc[i * DC + j]);
    }
  }
  for (int i = 0; i < RB; ++i)
    for (int j = 0; j < DC; ++j) S::storeu(o + int64_t(i) * ldo + c0 + j * S::W, acc[i * DC + j]);
}

/// Picks the compile-time vector count (DC) for `nvec` columns by recursion from the largest.
template <class S, KvType T, int RB, int DC>
void pv_dispatch(int nvec, bool tail, float* o, int ldo, const float* alpha, const float* p, int ldp,
                 const void* const* v, int n, int c0, int tail_n, RowSpans spans) {
  if constexpr (DC >= 1) {
    if (nvec == DC) {
      if (tail)
        pv_block<S, T, RB, DC, true>(o, ldo, alpha, p, ldp, v, n, c0, tail_n, spans);
      else
        pv_block<S, T, RB, DC, false>(o, ldo, alpha, p, ldp, v, n, c0, tail_n, spans);
      return;
    }
    pv_dispatch<S, T, RB, DC - 1>(nvec, tail, o, ldo, alpha, p, ldp, v, n, c0, tail_n, spans);
  }
}

/// What run_rows sizes for `rows` rows (any RB <= 4 and vector width <= 16 floats).
inline void reserve_scratch(int rows, int d, int dv) {
  ItemScratch& sc = item_scratch();
  const std::size_t rp = std::size_t(round_up(rows, 4)), ldq = std::size_t(round_up(d, kQAlign)), ldo = std::size_t(round_up(dv, 16));
  sc.qf.reserve(rp * ldq), sc.qb.reserve(rp * ldq), sc.s.reserve(rp * kChunk), sc.o.reserve(rp * ldo);
  sc.state.reserve(rp * 3), sc.span.reserve(rp * 2);
  sc.qi.reserve(rp * ldq), sc.wi.reserve(rp * kChunk), sc.iscale.reserve(rp * 2);
  sc.kv_rows.reserve(std::size_t(kChunk) * std::size_t(d + dv) * sizeof(float));  // gathered rows, widest storage
}

template <class S, KvType T, class Qk, int RB>
void run_rows(const KernelArgs& a, const WorkItem& it, float* partials) {
  constexpr int KB = S::kAcc / RB;
  constexpr int DCmax = std::min(S::kAcc / RB, 8);
  const int g = a.group, d = a.head_size, dv = a.head_size_v;
  const int rows = item_rows(it, g), rp = round_up(rows, RB);
  const int ldq = round_up(d, kQAlign), ldo = round_up(dv, S::W);
  ItemScratch& sc = item_scratch();
  sc.qf.assign(std::size_t(rp) * ldq, 0.0f);
  sc.s.resize(std::size_t(rp) * kChunk);
  sc.o.assign(std::size_t(rp) * ldo, 0.0f);
  sc.state.resize(std::size_t(rp) * 3);
  sc.span.resize(std::size_t(rp) * 2);
  int* span_lo = sc.span.data();
  int* span_hi = span_lo + rp;
  float* m = sc.state.data();
  float* l = m + rp;
  float* alpha = l + rp;
  for (int r = 0; r < rp; ++r) m[r] = -std::numeric_limits<float>::infinity(), l[r] = 0.0f, alpha[r] = 1.0f;

  // Query rows: token-major, the group's heads adjacent (they are adjacent in q too).
  const int s_idx = it.seq, h = it.kv_head;
  const int64_t tok0 = a.query_start_loc[s_idx] + it.q_begin;
  for (int r = 0; r < rows; ++r) {
    const int64_t e = (tok0 + r / g) * a.q_tok_stride + int64_t(h * g + r % g) * a.q_head_stride;
    float* dst = sc.qf.data() + int64_t(r) * ldq;
    for (int x = 0; x < d; ++x) dst[x] = load_as_float(a.q, a.q_dtype, e + x);
  }
  if (a.int4)  // the cache holds rotated vectors: q·k = rotate(q)·y / d (folded into sscale)
    for (int r = 0; r < rows; ++r) int4_head::rotate_query(sc.qf.data() + int64_t(r) * ldq, d, a.q_dtype, &hadamard_simd);
  if (a.turboquant && !a.kv.tq.key_fp8())  // keys in the orthonormal rotated space: q·k = (H·q / √d)·k' (fp32, as vLLM's q_rot)
    for (int r = 0; r < rows; ++r) turboquant::rotate(sc.qf.data() + int64_t(r) * ldq, d, &hadamard_simd);
  QTile qt{sc.qf.data(), nullptr, ldq};
  if constexpr (Qk::kNeedsBf16) {
    sc.qb.resize(sc.qf.size());
    for (std::size_t i = 0; i < sc.qf.size(); ++i) sc.qb[i] = f32_to_bf16(sc.qf[i]);
    qt.b = sc.qb.data();
  }
  if constexpr (IntDot<Qk>) Qk::quantize_q(sc, rp, d, qt);

  const int32_t seq_len = a.seq_lens[s_idx];
  const int32_t first_pos = seq_len - (a.query_start_loc[s_idx + 1] - a.query_start_loc[s_idx]);
  const int32_t p0 = first_pos + it.q_begin, p1 = first_pos + it.q_end - 1;
  const float sscale = a.scale * a.kv.k_scales[h] * (T == KvType::e4m3 ? kE4m3Rebias : 1.0f) / (a.int4 ? float(d) : 1.0f);
  const float cap = a.soft_cap;
  const int32_t* bt = a.block_table + int64_t(s_idx) * a.max_blocks_per_seq;
  const char* base = static_cast<const char*>(a.kv.base);
  const int64_t eb = kv_bytes<T>(), head_off = int64_t(h) * a.kv.head_stride;
  const int bs = a.kv.block_size;
  const void* kp[kChunk + S::kAcc];
  const void* vp[kChunk + S::kAcc];
  float* sbuf = sc.s.data();
  float* obuf = sc.o.data();
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t row_bytes = int64_t(d) * eb, vrow_bytes = int64_t(dv) * eb;
  // Cache bytes per element and per row (int4: bytes of two codes; nvfp4: codes and block scales;
  // turboquant: a slot's K or V part; all unpacked to rows below).
  const int64_t ceb = a.int4 || a.kv.nvfp4 || a.turboquant ? 1 : eb;
  const int64_t stored_row = a.int4 ? d / 2 : a.kv.nvfp4 ? nvfp4::row_bytes(d) : a.turboquant ? turboquant::key_bytes(a.kv.tq, d) : row_bytes;
  const int64_t stored_vrow = a.int4        ? dv / 2
                              : a.kv.nvfp4 ? nvfp4::row_bytes(dv)
                              : a.turboquant ? turboquant::value_bytes(a.kv.tq, dv)
                                                : vrow_bytes;
  auto prefetch_rows = [&](int32_t k0, int32_t k1) {  // software prefetch of keys [k0, k1)
    int32_t blk = k0 / bs, slot = k0 % bs;
    for (int32_t key = k0; key < k1; ++key) {
      const int64_t e = int64_t(bt[blk]) * a.kv.block_stride + int64_t(slot) * a.kv.token_stride + head_off;
      const char* kr = base + e * ceb;
      const char* vr = base + (e + a.kv.v_offset) * ceb;
      for (int64_t x = 0; x < stored_row; x += 64) cpu::prefetch(kr + x);
      for (int64_t x = 0; x < stored_vrow; x += 64) cpu::prefetch(vr + x);
      if (a.kv.k_token_scales) {  // the key's scales' line, where the key starts one (a miss stalled the chunk's gather)
        const int64_t ti = token_scale_index(a.kv, bt[blk], slot, h);
        if (key == k0 || ti % 16 < a.kv.num_kv_heads) cpu::prefetch(a.kv.k_token_scales + ti), cpu::prefetch(a.kv.v_token_scales + ti);
      }
      if (++slot == bs) slot = 0, ++blk;
    }
  };

  // HND_PAIRS caches (rows not contiguous) are gathered per chunk into contiguous rows; int4
  // caches are unpacked into bf16 rows of code − zero point, nvfp4 ones into bf16 rows of e2m1 ·
  // block scale (kv_type bf16 for both), turboquant slots into fp32 rows (kv_type f32).
  const bool gather = a.kv.layout == KVLayout::HND_PAIRS || a.int4 || a.kv.nvfp4 || a.turboquant;
  if (gather) sc.kv_rows.resize(std::size_t(kChunk) * std::size_t(row_bytes + vrow_bytes));
  // Per-token-head caches: each key's K scale multiplies its score, its V scale its weight in P·V.
  const bool token = a.kv.k_token_scales != nullptr;
  alignas(32) float kts[kChunk], vts[kChunk];
  alignas(32) float kmul[kChunk];  // per-token-head caches: sscale times each key's K scale
  const TqCentroids tq_centroids = a.turboquant ? TqCentroids(d, a.kv.tq) : TqCentroids();  // looked up once per item
  for (int32_t c = it.kv_begin; c < it.kv_end; c += kChunk) {
    const int n = std::min<int32_t>(kChunk, it.kv_end - c);
    // The key's block and slot, stepped rather than divided per key (the division showed in
    // AVX2 decode profiles).
    int32_t blk = c / bs, slot = c % bs - 1;
    for (int j = 0; j < n; ++j) {
      if (++slot == bs) slot = 0, ++blk;
      const int32_t pb = bt[blk];
      if (token) {
        const int64_t ti = token_scale_index(a.kv, pb, slot, h);
        kts[j] = a.kv.k_token_scales[ti], vts[j] = a.kv.v_token_scales[ti];
      }
      if constexpr (T == KvType::bf16 || T == KvType::i8)
        if (a.int4) {  // bf16 rows, or int8 rows for integer dot products
          char* kr = sc.kv_rows.data() + std::size_t(j) * std::size_t(row_bytes + vrow_bytes);
          uint8_t kbuf[kMaxHeadSize / 2], vbuf[kMaxHeadSize / 2];  // the key's bytes in vLLM's row order
          const int64_t e = int64_t(pb) * a.kv.block_stride + int64_t(slot) * a.kv.token_stride + head_off;
          const uint8_t* kc = reinterpret_cast<const uint8_t*>(base + e);  // row layouts: in place
          const uint8_t* vc = kc + a.kv.v_offset;
          if (a.kv.layout == KVLayout::HND_PAIRS) {
            int4_head::load_vector(a.kv, pb, slot, h, false, d, kbuf);
            int4_head::load_vector(a.kv, pb, slot, h, true, dv, vbuf);
            kc = kbuf, vc = vbuf;
          }
          if constexpr (T == KvType::i8) {
            unpack_int4_i8(kc, d, int4_head::zero_point(kts[j]), reinterpret_cast<int8_t*>(kr));
            unpack_int4_i8(vc, dv, int4_head::zero_point(vts[j]), reinterpret_cast<int8_t*>(kr + row_bytes));
          } else {
            unpack_int4(kc, d, int4_head::zero_point(kts[j]), reinterpret_cast<uint16_t*>(kr));
            unpack_int4(vc, dv, int4_head::zero_point(vts[j]), reinterpret_cast<uint16_t*>(kr + row_bytes));
          }
          kts[j] = int4_head::scale_of(kts[j]), vts[j] = int4_head::scale_of(vts[j]);
          kp[j] = kr, vp[j] = kr + row_bytes;
          continue;
        }
      if constexpr (T == KvType::bf16)
        if (a.kv.nvfp4) {
          char* kr = sc.kv_rows.data() + std::size_t(j) * std::size_t(row_bytes + vrow_bytes);
          const int64_t e = int64_t(pb) * a.kv.block_stride + int64_t(slot) * a.kv.token_stride + head_off;
          unpack_nvfp4(reinterpret_cast<const uint8_t*>(base + e), d, reinterpret_cast<uint16_t*>(kr));
          unpack_nvfp4(reinterpret_cast<const uint8_t*>(base + e + a.kv.v_offset), dv, reinterpret_cast<uint16_t*>(kr + row_bytes));
          kp[j] = kr, vp[j] = kr + row_bytes;
          continue;
        }
      if constexpr (T == KvType::f32)
        if (a.turboquant) {  // the slot's K (rotated, or fp8 values) and V as fp32 rows
          char* kr = sc.kv_rows.data() + std::size_t(j) * std::size_t(row_bytes + vrow_bytes);
          const uint8_t* tq_slot = reinterpret_cast<const uint8_t*>(base) +
                                   int64_t(pb) * a.kv.block_stride + int64_t(slot) * a.kv.token_stride + head_off;
          unpack_tq_key(tq_slot, d, a.kv.tq, tq_centroids, reinterpret_cast<float*>(kr));
          unpack_tq_value(tq_slot + a.kv.v_offset, dv, a.kv.tq, reinterpret_cast<float*>(kr + row_bytes));
          kp[j] = kr, vp[j] = kr + row_bytes;
          continue;
        }
      if (gather) {
        char* kr = sc.kv_rows.data() + std::size_t(j) * std::size_t(row_bytes + vrow_bytes);
        gather_kv_vector(a.kv, pb, slot, h, false, d, kr);
        gather_kv_vector(a.kv, pb, slot, h, true, dv, kr + row_bytes);
        kp[j] = kr, vp[j] = kr + row_bytes;
        continue;
      }
      const int64_t e = int64_t(pb) * a.kv.block_stride + int64_t(slot) * a.kv.token_stride + head_off;
      kp[j] = base + e * eb;
      vp[j] = base + (e + a.kv.v_offset) * eb;
    }
    // Per-token-head caches, per chunk rather than per row: the score factors, and V scales of 0
    // past the chunk (their keys' weights are 0, and 0 · garbage may be NaN).
    if (token) {
      for (int j = 0; j < kChunk; ++j) kmul[j] = j < n ? kts[j] * sscale : sscale;
      for (int j = n; j < kChunk; ++j) vts[j] = 0.0f;
    }
    const int nk = round_up(n, KB);
    for (int j = n; j < nk; ++j) kp[j] = kp[n - 1], vp[j] = vp[n - 1];  // padding keys repeat a real row: never poison

    for (int r0 = 0; r0 < rp; r0 += RB)
      for (int j0 = 0; j0 < nk; j0 += KB) {
        // The next chunk's K and V rows, a few per micro-tile: spread over the Q·Kᵀ loop so the
        // line fills overlap compute (one burst per chunk would queue behind itself).
        if (r0 == 0) prefetch_rows(c + kChunk + j0, std::min<int32_t>(c + kChunk + j0 + KB, it.kv_end));
        Qk::template block<S, T, RB, KB>(qt, r0, kp + j0, d, sbuf + r0 * kChunk + j0, kChunk);
      }

    const bool need_mask = (a.causal && c + n - 1 > BatchMetadata::mm_causal_limit(a.mm_ranges, s_idx, p0)) ||
                           (a.window > 0 && c <= p1 - a.window);
    for (int r = 0; r < rows; ++r) {
      float* sr = sbuf + r * kChunk;
      const int32_t pos = first_pos + it.q_begin + r / g;
      const int32_t last = BatchMetadata::mm_causal_limit(a.mm_ranges, s_idx, pos);  // last causally visible key
      for (int x = 0; x < kChunk; x += S::W) {
        typename S::F v = S::mul(S::loadu(sr + x), token ? S::loadu(kmul + x) : S::set1(sscale));
        if (cap > 0) {  // cap·tanh(s/cap) = cap·(1 − 2/(e^{2s/cap} + 1)), before any mask
          const typename S::F e = S::exp(S::mul(v, S::set1(2.0f / cap)));
          v = S::mul(S::set1(cap), S::sub(S::set1(1.0f), S::div(S::set1(2.0f), S::add(e, S::set1(1.0f)))));
        }
        S::storeu(sr + x, v);
      }
      if (a.alibi_slopes) {
        const float slope = a.alibi_slopes[h * g + r % g];
        for (int j = 0; j < n; ++j) sr[j] += slope * float(c + j - pos);
      }
      span_lo[r] = 0, span_hi[r] = n;
      if (need_mask) {
        for (int j = 0; j < n; ++j) {
          const int32_t key = c + j;
          if ((a.causal && key > last) || (a.window > 0 && key <= pos - a.window)) sr[j] = kNegInf;
        }
        // Causal and window masks leave an interval of keys visible.
        if (a.causal) span_hi[r] = std::clamp(last + 1 - c, 0, n);
        if (a.window > 0) span_lo[r] = std::clamp(pos - a.window + 1 - c, 0, n);
      }
      for (int j = n; j < kChunk; ++j) sr[j] = kNegInf;

      // Online softmax: raise the running max, rescale what came before by alpha.
      typename S::F mx = S::set1(kNegInf);
      for (int x = 0; x < kChunk; x += S::W) mx = S::max(mx, S::loadu(sr + x));
      float m_new = std::max(m[r], S::hmax(mx));
      if (m_new == kNegInf) {
        // Every score so far is -inf, or NaN: a max may drop a NaN (and with one lane it drops
        // whatever came before it), and a visible NaN must reach the output as in the oracle.
        bool nan = false;
        for (int j = 0; j < n; ++j) nan = nan || std::isnan(sr[j]);
        if (!nan) {  // nothing visible yet in this row
          alpha[r] = 1.0f;
          for (int x = 0; x < kChunk; x += S::W) S::storeu(sr + x, S::zero());
          continue;
        }
        m_new = std::numeric_limits<float>::quiet_NaN();  // p, l and the output all become NaN
      }
      alpha[r] = std::exp(m[r] - m_new);
      typename S::F sum = S::zero();
      const typename S::F mv = S::set1(m_new);
      for (int x = 0; x < kChunk; x += S::W) {
        const typename S::F p = S::exp(S::sub(S::loadu(sr + x), mv));
        S::storeu(sr + x, p);
        sum = S::add(sum, p);
      }
      l[r] = l[r] * alpha[r] + S::hsum(sum);
      m[r] = m_new;
      // The V scales, after the row sum, and with masks only on keys P·V reads (a masked slot's
      // scale may be NaN poison); masked keys' weights stay 0.
      if (token && !need_mask)
        for (int x = 0; x < kChunk; x += S::W) S::storeu(sr + x, S::mul(S::loadu(sr + x), S::loadu(vts + x)));
      else if (token)
        for (int j = span_lo[r]; j < span_hi[r]; ++j) sr[j] *= vts[j];
    }
    for (int r = rows; r < rp; ++r) {
      for (int j = 0; j < kChunk; ++j) sbuf[r * kChunk + j] = 0.0f;
      span_lo[r] = span_hi[r] = 0;
    }

    if constexpr (IntDot<Qk>) {  // weights 0 on masked keys and past n, codes finite: no key skipped
      Qk::template pv<T, RB>(sc, obuf, ldo, alpha, sbuf, kChunk, vp, n, rp, dv);
      continue;
    }
    const int nvec = (dv + S::W - 1) / S::W, tail_n = dv % S::W;
    for (int r0 = 0; r0 < rp; r0 += RB) {
      for (int v0 = 0; v0 < nvec; v0 += DCmax) {
        const int cnt = std::min(DCmax, nvec - v0);
        const bool tail = tail_n != 0 && v0 + cnt == nvec;
        const RowSpans spans = need_mask ? RowSpans{span_lo + r0, span_hi + r0} : RowSpans{};
        pv_dispatch<S, T, RB, DCmax>(cnt, tail, obuf + int64_t(r0) * ldo, ldo, alpha + r0, sbuf + r0 * kChunk, kChunk, vp,
                                     n, v0 * S::W, tail_n, spans);
      }
    }
  }

  if (a.int4)  // outputs over rotated V rows, rotated back (linear: before the normalization and merges)
    for (int r = 0; r < rows; ++r) int4_head::unrotate(obuf + int64_t(r) * ldo, dv, &hadamard_simd);
  if (it.partial >= 0) {
    float* po = partials + it.partial;
    for (int r = 0; r < rows; ++r) std::copy(obuf + int64_t(r) * ldo, obuf + int64_t(r) * ldo + dv, po + int64_t(r) * dv);
    std::copy(m, m + rows, po + int64_t(rows) * dv);
    std::copy(l, l + rows, po + int64_t(rows) * (dv + 1));
    return;
  }
  for (int r = 0; r < rows; ++r) store_row(a, tok0 + r / g, h * g + r % g, obuf + int64_t(r) * ldo, m[r], l[r]);
}

/// Row-block size by tile height: 4 rows share each K/V load when there are enough rows.
template <class S, KvType T, class Qk>
void run_item(const KernelArgs& a, const WorkItem& it, float* partials) {
  const int rows = item_rows(it, a.group);
  if (rows >= 4)
    run_rows<S, T, Qk, 4>(a, it, partials);
  else if (rows >= 2)
    run_rows<S, T, Qk, 2>(a, it, partials);
  else
    run_rows<S, T, Qk, 1>(a, it, partials);
}

template <class Qk>
KernelTable make_table() {
  KernelTable t;
  t.by_kv[int(KvType::f32)] = &run_item<Simd, KvType::f32, Qk>;
  t.by_kv[int(KvType::f16)] = &run_item<Simd, KvType::f16, Qk>;
  t.by_kv[int(KvType::bf16)] = &run_item<Simd, KvType::bf16, Qk>;
  t.by_kv[int(KvType::e4m3)] = &run_item<Simd, KvType::e4m3, Qk>;
  t.by_kv[int(KvType::e5m2)] = &run_item<Simd, KvType::e5m2, Qk>;
  t.by_kv[int(KvType::i8)] = &run_item<Simd, KvType::i8, Qk>;
  return t;
}

}  // namespace attn::cpu_flash::ATTN_CF_NS
