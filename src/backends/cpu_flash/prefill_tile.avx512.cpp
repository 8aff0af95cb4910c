// Prefill path, tile phase: one query tile (token-major rows: the GQA group's heads stacked per
// token) against the packed 64-key tiles of its KV head. Per key tile:
//   1. S = Q·Kᵀ for 4 rows × up to 64 keys in registers (16 accumulators), the whole d
//      reduction in registers: a broadcast q pair (bf16) or element (fp32) per row, one
//      unit-stride K vector per 16 keys, no horizontal sums.
//   2. online softmax in the same registers: row max, exp2 with log2(e)·scale folded into one
//      multiply, running sum as a 16-lane vector per row, P stored as bf16 (or fp32).
//   3. O = O·alpha + P·V: 4 rows × 64 dims of O in registers over the tile's key pairs.
// Key tiles outside every row's visible range are never visited (causal future, sliding
// window); only 16-key vectors that some row sees are computed, and only micro-tiles crossing
// a row's first or last visible key are masked.
// On AMX (PackLayout::amx) steps 1 and 3 run on the tile unit for 16 rows × the whole 64-key
// tile at a time (prefill_amx.cpp); step 2 reads S from memory, O is rescaled in memory.
// The micro-kernels (Ctx, qk_softmax, pv, pv_guarded) are in prefill_tile_micro.inl; items
// whose keys fit one short range (sliding windows) take prefill_tile_short.inl instead.
#define ATTN_CF_NS prefill_avx512
#include "kernels/simd/simd_avx512.hpp"
#include "attn/numeric.hpp"
#include "backends/cpu_flash/head_sizes.hpp"
#include "backends/cpu_flash/hadamard_simd.hpp"
#include "backends/cpu_flash/prefill.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attn/tensor.hpp"

namespace attn::cpu_flash::prefill {
namespace {

/// Rows per micro-tile: 4 rows × 4 key vectors = 16 accumulators, leaving registers for the 4
/// K vectors and the broadcasts (6 rows measured within noise, 2 rows clearly worse).
constexpr int R = 4;
/// Masked logits: finite, so `logit − max` stays finite and exp2 of it is exactly 0 (vscalefps
/// of −1e30), with no −inf − −inf NaN and no dependence on FTZ.
constexpr float kMasked = -1e30f;
constexpr float kLog2e = 1.44269504088896341f;

unsigned g_stage_mask = 0;

/// 2^x. vreduceps gives f = x − floor(x) ∈ [0, 1), a polynomial 2^f (coefficients highest
/// first, fitted on [0, 1) with the constant pinned to 1 so that 2^0 = 1 exactly: an unchanged
/// row max rescales nothing), and vscalefps multiplies by 2^floor(x) of its own second operand:
/// no range clamps (overflow → inf, underflow → 0).
template <std::size_t N>
inline __m512 exp2_poly(__m512 x, const std::array<float, N>& c) {
  const __m512 f = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 p = _mm512_set1_ps(c[0]);
  for (std::size_t i = 1; i < N; ++i) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c[i]));
  return _mm512_scalef_ps(_mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f)), x);
}
/// Degree 5, relative error 9.5e-8: 7 ops.
inline __m512 exp2v(__m512 x) {
  static constexpr std::array<float, 5> c = {0.0018671303987503052f, 0.009017028845846653f, 0.05579991266131401f,
                                             0.24016444385051727f, 0.6931512951850891f};
  return exp2_poly(x, c);
}
/// For weights rounded to bf16 right after (P on bf16 tiles): degree 3, relative error 8.6e-5
/// (bf16 keeps 2^-9 = 2.0e-3), two FMAs fewer per vector on the hot softmax. The running
/// maxima's rescale (alpha) and the sinks keep exp2v.
inline __m512 exp2v_bf16(__m512 x) {
  static constexpr std::array<float, 3> c = {0.07706617563962936f, 0.22764593362808228f, 0.6951165795326233f};
  return exp2_poly(x, c);
}

/// Copies n bf16 values inline: a q row is a few cache lines, too short for a memmove call.
inline void copy_bf16_row(const uint16_t* src, uint16_t* dst, int n) {
  for (int x = 0; x < n; x += 32) {
    const __mmask32 k = n - x >= 32 ? ~__mmask32(0) : __mmask32((1u << (n - x)) - 1);
    _mm512_mask_storeu_epi16(dst + x, k, _mm512_maskz_loadu_epi16(k, src + x));
  }
}

/// Requests the lines of rows [r_begin, r_end) that later work needs: their q rows in the next
/// two items of this KV head (the plan's order: what the team takes next) and their output rows,
/// which store_rows writes at the item's end. q and the output are out in DRAM at long prefills
/// (16 MB each at 2048 tokens of Llama-3.1-8B or gpt-oss), and requested all at once they fill
/// the miss queue and stall the item anyway: the callers spread them over the item's micro-tiles
/// (short ranges) or key tiles (tile by tile), where they overlap the products.
void prefetch_rows(const KernelArgs& a, const WorkItem& it, int rows, int r_begin, int r_end) {
  const int g = a.group, n_tok = it.q_end - it.q_begin;
  const int64_t tok0 = a.query_start_loc[it.seq] + it.q_begin, q_len = a.query_start_loc[it.seq + 1] - a.query_start_loc[it.seq];
  const int64_t qe = int64_t(dtype_size(a.q_dtype)), oe = int64_t(dtype_size(a.out_dtype));
  const auto* q = static_cast<const char*>(a.q);
  auto* out = static_cast<char*>(a.out);
  for (int r = r_begin; r < std::min(r_end, rows); ++r) {
    const int t = r / g, head = it.kv_head * g + r % g;
    for (int ahead = 1; ahead <= 2; ++ahead) {
      if (it.q_begin + t + ahead * n_tok >= q_len) break;
      const char* row = q + ((tok0 + t + ahead * n_tok) * a.q_tok_stride + head * a.q_head_stride) * qe;
      for (int64_t x = 0; x < a.head_size * qe; x += 64) __builtin_prefetch(row + x, 0, 3);
    }
    char* orow = out + ((tok0 + t) * a.o_tok_stride + head * a.o_head_stride) * oe;
    for (int64_t x = 0; x < a.head_size_v * oe; x += 64) __builtin_prefetch(orow + x, 1, 3);  // for writing
  }
}

/// Per-thread tile state, grown on demand and reused across items and calls.
struct Scratch {
  std::vector<float> o, lsum, qf, pf, m2, alpha, s;
  std::vector<uint16_t> qb, pb, vclean;
  std::vector<int32_t> lo, hi;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

#include "backends/cpu_flash/prefill_tile_micro.inl"

/// Normalizes and writes the item's rows: the sink as one more logit in the denominator, 1/l,
/// the V scale; vectorized, the factors too (16 rows at a time), since with short windows
/// (gpt-oss: 128 keys) a scalar row store costs a sizeable share of an item.
void store_rows(const KernelArgs& a, const Ctx& cx, int rows, int64_t tok0, int kv_head) {
  const int g = a.group, dv = a.head_size_v;
  const float vscale = a.kv.v_scales[kv_head] * (a.kv_type == KvType::e4m3 ? kE4m3Rebias : 1.0f);
  int t = 0, j = 0;  // row r's token and head within the group
  for (int r16 = 0; r16 < rows; r16 += 16) {
    const int n = std::min(16, rows - r16);
    const __mmask16 live = __mmask16((1u << n) - 1);
    alignas(64) float l[16] = {}, sink2[16] = {}, factor[16];
    for (int i = 0, jj = j; i < n; ++i, jj = jj + 1 == g ? 0 : jj + 1) {
      l[i] = _mm512_reduce_add_ps(_mm512_loadu_ps(cx.lsum + (r16 + i) * 16));
      if (a.sinks) sink2[i] = a.sinks[kv_head * g + jj] * kLog2e;  // log2 units, like m2
    }
    const __m512 lv = _mm512_load_ps(l), m2 = _mm512_maskz_loadu_ps(live, cx.m2 + r16);
    __m512 f;
    if (a.sinks) {  // w / (l·w + e^(sink − mm)), w = e^(m − mm), mm = max(m, sink)
      const __m512 s2 = _mm512_load_ps(sink2), mm = _mm512_max_ps(m2, s2), w = exp2v(_mm512_sub_ps(m2, mm));
      f = _mm512_div_ps(w, _mm512_fmadd_ps(lv, w, exp2v(_mm512_sub_ps(s2, mm))));
    } else {  // fully masked row -> 0 (a NaN sum stays NaN)
      const __mmask16 zero = _mm512_cmp_ps_mask(lv, _mm512_setzero_ps(), _CMP_EQ_OQ);
      f = _mm512_maskz_div_ps(__mmask16(~zero), _mm512_set1_ps(1.0f), lv);
    }
    _mm512_store_ps(factor, _mm512_mul_ps(f, _mm512_set1_ps(vscale)));
    for (int i = 0; i < n; ++i, j = j + 1 == g ? 0 : j + 1, t += j == 0) {
      const int r = r16 + i, head = kv_head * g + j;
      if (a.int4) int4_head::unrotate(cx.o + int64_t(r) * cx.dvp, dv, &ATTN_CF_NS::hadamard_simd);  // outputs over rotated V rows
      const __m512 fv = _mm512_set1_ps(factor[i]);
      const int64_t base = (tok0 + t) * a.o_tok_stride + int64_t(head) * a.o_head_stride;
      const float* o = cx.o + int64_t(r) * cx.dvp;
      for (int x = 0; x < dv; x += 16) {
        const __mmask16 k = dv - x >= 16 ? __mmask16(0xffff) : __mmask16((1u << (dv - x)) - 1);
        const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(o + x), fv);
        if (a.out_dtype == DType::float32)
          _mm512_mask_storeu_ps(static_cast<float*>(a.out) + base + x, k, v);
        else if (a.out_dtype == DType::bfloat16)
          _mm256_mask_storeu_epi16(static_cast<uint16_t*>(a.out) + base + x, k, (__m256i)_mm512_cvtneps_pbh(v));
        else
          _mm256_mask_storeu_epi16(static_cast<uint16_t*>(a.out) + base + x, k,
                                   _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      }
    }
  }
}

#include "backends/cpu_flash/prefill_tile_short.inl"

using QkFn = void (*)(const Ctx&, int, const char*, int, int32_t);
using PvFn = void (*)(const Ctx&, int, const char*, int, int, int);

/// [bf16][cap][mask][NV − 1]
template <bool Bf16, bool Cap, bool Mask>
constexpr std::array<QkFn, 4> qk_row() {
  return {&qk_softmax<Bf16, 1, Mask, Cap>, &qk_softmax<Bf16, 2, Mask, Cap>, &qk_softmax<Bf16, 3, Mask, Cap>,
          &qk_softmax<Bf16, 4, Mask, Cap>};
}
template <bool Bf16>
constexpr std::array<PvFn, 4> pv_row() {
  return {&pv<Bf16, 1>, &pv<Bf16, 2>, &pv<Bf16, 3>, &pv<Bf16, 4>};
}

/// AMX P·V for a V tile holding inf / NaN: the tile product runs on a copy with those values
/// zeroed (so rows that do not see their keys add exact zeros, as with finite values), then each
/// row adds p · value for the ones it sees, as the reference does.
void pv_amx_nonfinite(const Ctx& cx, int g0, int rows, const char* vtile, int32_t key0, uint16_t* clean) {
  const auto* v = reinterpret_cast<const uint16_t*>(vtile);
  const int64_t n = int64_t(kTileKeys) * cx.dvp;
  for (int64_t i = 0; i < n; ++i) clean[i] = bf16_nonfinite(v[i]) ? uint16_t(0) : v[i];
  amx_pv(cx.pb + g0 * kTileKeys, reinterpret_cast<const char*>(clean), cx.dvp, cx.o + int64_t(g0) * cx.dvp);
  for (int r = g0; r < std::min(g0 + 16, rows); ++r) {
    const int kb = std::max(0, cx.lo[r] - key0), ke = std::min(kTileKeys, cx.hi[r] - key0 + 1);
    for (int k = kb; k < ke; ++k) {
      const float p = bf16_to_f32(cx.pb[r * kTileKeys + k]);
      for (int x = 0; x < cx.dvp; ++x) {
        const uint16_t b = v[2 * (int64_t(k / 2) * cx.dvp + x) + (k & 1)];
        if (bf16_nonfinite(b)) cx.o[int64_t(r) * cx.dvp + x] += p * bf16_to_f32(b);
      }
    }
  }
}

/// One key tile on AMX for the 16-row groups that see some of it, two groups at a time where both
/// do (each K / V tile load then serves 32 rows): S on the tile unit, the softmax step per 4-row
/// micro-tile over the whole tile, O rescaled in memory, P·V on the unit. Software-pipelined one
/// unit deep: the next unit's S is issued to the tile unit before this unit's softmax, so the
/// unit computes it while the vector units run the softmax (the two phases of one unit depend on
/// each other; those of neighbouring units do not).
void amx_key_tile(const KernelArgs& a, const PackLayout& L, const Ctx& cx, Scratch& sc, int rows, int rp, const char* kt,
                  const char* vt, int32_t key0) {
  static constexpr std::array<std::array<QkFn, 2>, 2> kQkS = {{
      {{&qk_softmax<true, 4, false, false, true>, &qk_softmax<true, 4, true, false, true>}},
      {{&qk_softmax<true, 4, false, true, true>, &qk_softmax<true, 4, true, true, true>}},
  }};
  const bool cap = a.soft_cap > 0, nonfinite_v = vt[L.v_tile_bytes - kVFlagBytes] != 0;
  const int32_t last = key0 + kTileKeys - 1;
  // Rows grow in position: a group's last row sees the furthest, its first the earliest.
  const auto sees = [&](int g0) { return g0 < rp && sc.hi[std::size_t(g0 + 15)] >= key0 && sc.lo[std::size_t(g0)] <= last; };
  struct Unit {
    int g0 = 0, groups = 0;  // first row, 16-row groups (0: none left)
  };
  // The next unit from the 32-row slot u0 on: both of its groups where both see the tile, else
  // the one that does.
  const auto next_unit = [&](int u0) {
    for (; u0 < rp; u0 += 32) {
      const bool a0 = sees(u0), a1 = sees(u0 + 16);
      if (a0 || a1) return Unit{a0 ? u0 : u0 + 16, a0 && a1 ? 2 : 1};
    }
    return Unit{};
  };
  const auto slot_after = [](const Unit& u) { return (u.g0 / 32 + 1) * 32; };
  const auto scores = [&](const Unit& u) {
    if (g_stage_mask & kSkipQk) return;
    float* s = sc.s.data() + int64_t(u.g0) * kTileKeys;
    if (u.groups == 2)
      amx_scores_pair(cx.qb + int64_t(u.g0) * cx.d, cx.d, kt, s);
    else
      amx_scores(cx.qb + int64_t(u.g0) * cx.d, cx.d, kt, s);
  };
  Unit u = next_unit(0);
  if (u.groups) scores(u);
  while (u.groups) {
    const Unit n = next_unit(slot_after(u));
    if (n.groups) scores(n);
    const int end = u.g0 + 16 * u.groups;
    for (int r0 = u.g0; r0 < end; r0 += R) {
      const bool mask = sc.hi[std::size_t(r0)] < last || sc.lo[std::size_t(r0 + R - 1)] > key0;
      kQkS[cap][mask](cx, r0, kt, 0, key0);
    }
    if (nonfinite_v && L.token) {  // a NaN V scale makes P itself NaN for masked keys: skip them per row
      for (int r0 = u.g0; r0 < end; r0 += R) pv_guarded<true>(cx, r0, vt, key0, 0, kTileKeys);
    } else {
      for (int r = u.g0; r < end; ++r) {
        if (cx.alpha[r] == 1.0f) continue;
        const __m512 al = _mm512_set1_ps(cx.alpha[r]);
        float* o = cx.o + int64_t(r) * cx.dvp;
        for (int x = 0; x < cx.dvp; x += 16) _mm512_storeu_ps(o + x, _mm512_mul_ps(_mm512_loadu_ps(o + x), al));
      }
      if (g_stage_mask & kSkipPv) {
      } else if (nonfinite_v) {
        for (int g0 = u.g0; g0 < end; g0 += 16) pv_amx_nonfinite(cx, g0, rows, vt, key0, sc.vclean.data());
      } else if (u.groups == 2) {
        amx_pv_pair(cx.pb + u.g0 * kTileKeys, vt, cx.dvp, cx.o + int64_t(u.g0) * cx.dvp);
      } else {
        amx_pv(cx.pb + u.g0 * kTileKeys, vt, cx.dvp, cx.o + int64_t(u.g0) * cx.dvp);
      }
    }
    u = n;
  }
}

template <bool Bf16>
void run(const KernelArgs& a, const PackLayout& L, const WorkItem& it, const char* buf) {
  static constexpr std::array<std::array<std::array<QkFn, 4>, 2>, 2> kQk = {{
      {{qk_row<Bf16, false, false>(), qk_row<Bf16, false, true>()}},
      {{qk_row<Bf16, true, false>(), qk_row<Bf16, true, true>()}},
  }};
  static constexpr std::array<PvFn, 4> kPv = pv_row<Bf16>();

  // d: the K tiles' dims (twice the head size where they hold bf16 hi and lo halves, q then
  // repeated: q·k_hi + q·k_lo); qd: q's.
  const int g = a.group, d = L.head_size, qd = a.head_size, dvp = L.dv_pad;
  const bool amx = Bf16 && L.amx;
  const int row_block = amx ? 16 : R;  // AMX tiles take 16 rows
  const int rows = item_rows(it, g), rp = (rows + row_block - 1) / row_block * row_block;
  const int s = it.seq, h = it.kv_head;
  Scratch& sc = scratch();
  // O, the sums and the maxima start from zero / kMasked on the tile-by-tile path only (below):
  // the short-range path writes every row of them.
  sc.o.resize(std::size_t(rp) * dvp), sc.lsum.resize(std::size_t(rp) * 16);
  sc.m2.resize(std::size_t(rp)), sc.alpha.resize(std::size_t(rp));
  sc.lo.resize(std::size_t(rp)), sc.hi.resize(std::size_t(rp));
  // Real Q rows are overwritten below; only the padding rows need their zeros.
  if constexpr (Bf16) {
    sc.qb.resize(std::size_t(rp) * d), sc.pb.resize(std::size_t(rp) * kTileKeys);
    std::fill(sc.qb.begin() + std::ptrdiff_t(rows) * d, sc.qb.end(), uint16_t(0));
    if (amx) sc.s.resize(std::size_t(rp) * kTileKeys), sc.vclean.resize(std::size_t(kTileKeys) * dvp);
  } else {
    sc.qf.resize(std::size_t(rp) * d), sc.pf.resize(std::size_t(rp) * kTileKeys);
    std::fill(sc.qf.begin() + std::ptrdiff_t(rows) * d, sc.qf.end(), 0.0f);
  }

  const int64_t tok0 = a.query_start_loc[s] + it.q_begin;
  const int32_t seq_len = a.seq_lens[s];
  const int32_t first_pos = seq_len - (a.query_start_loc[s + 1] - a.query_start_loc[s]) + it.q_begin;
  // Row r is token t = r / g, head h·g + j with j = r % g (counted, not divided: these loops run
  // once per row of every item).
  for (int r = 0, t = 0, j = 0; r < rp; ++r, j = j + 1 == g ? 0 : j + 1, t += j == 0) {
    // Padding rows repeat the last real row's range (their zero q gives finite scores, and
    // they never add masks of their own); they are never stored.
    const int32_t pos = first_pos + (r < rows ? t : (rows - 1) / g);
    sc.hi[std::size_t(r)] = a.causal ? std::min(pos, seq_len - 1) : seq_len - 1;
    sc.lo[std::size_t(r)] = a.window > 0 ? std::max(0, pos - a.window + 1) : 0;
  }
  // The item's key range, tightened to what its rows can see, and its path.
  const int32_t kb = std::max(it.kv_begin, sc.lo[0]), ke = std::min(it.kv_end, sc.hi[std::size_t(rp - 1)] + 1);
  const bool short_range = !(g_stage_mask & kTileByTile) && short_range_fits(L, kb, ke);
  // The short-range path reads plain bf16 q where it lies when each micro-tile's rows are one
  // token's consecutive heads: a copy would cost as much as the item's first products (the rows
  // are fresh from DRAM, the copy's stores miss L1 behind the K / V the last item streamed).
  const bool q_in_place = Bf16 && short_range && !a.int4 && d == qd && g % R == 0 && rows == rp &&
                          a.q_head_stride % 2 == 0 && a.q_tok_stride % 2 == 0 && reinterpret_cast<uintptr_t>(a.q) % 4 == 0;
  for (int r = 0, t = 0, j = 0; r < rows && !q_in_place; ++r, j = j + 1 == g ? 0 : j + 1, t += j == 0) {
    const int64_t e = (tok0 + t) * a.q_tok_stride + int64_t(h * g + j) * a.q_head_stride;
    // int4 and turboquant's 3 / 4-bit keys live in a rotated space: q rotated like them (see
    // int4_head, turboquant::rotate), then as the tiles take it. turboquant's bf16 tiles hold the
    // keys rotated back instead, so bf16 q is taken as it is (one bf16 rounding fewer).
    if (a.int4 || (a.turboquant && !a.kv.tq.key_fp8() && !Bf16)) {
      alignas(64) float qr[kMaxHeadSize];
      for (int x = 0; x < qd; ++x) qr[x] = load_as_float(a.q, a.q_dtype, e + x);
      if (a.int4)
        int4_head::rotate_query(qr, qd, a.q_dtype, &ATTN_CF_NS::hadamard_simd);
      else
        turboquant::rotate(qr, qd, &ATTN_CF_NS::hadamard_simd);
      for (int x = 0; x < qd; ++x) {
        if constexpr (Bf16)
          sc.qb[std::size_t(r) * d + x] = f32_to_bf16(qr[x]);
        else
          sc.qf[std::size_t(r) * d + x] = qr[x];
      }
    } else if constexpr (Bf16) {
      const uint16_t* src = static_cast<const uint16_t*>(a.q) + e;
      for (int x = 0; x < d; x += qd) copy_bf16_row(src, sc.qb.data() + int64_t(r) * d + x, qd);
    } else {
      for (int x = 0; x < qd; ++x) sc.qf[std::size_t(r) * d + x] = load_as_float(a.q, a.q_dtype, e + x);
    }
  }

  Ctx cx;
  cx.qb = sc.qb.data(), cx.qf = sc.qf.data(), cx.d = d, cx.dvp = dvp;
  cx.pb = sc.pb.data(), cx.pf = sc.pf.data(), cx.o = sc.o.data(), cx.lsum = sc.lsum.data();
  cx.m2 = sc.m2.data(), cx.alpha = sc.alpha.data(), cx.lo = sc.lo.data(), cx.hi = sc.hi.data();
  const float kscale = a.scale * a.kv.k_scales[h] * (a.kv_type == KvType::e4m3 ? kE4m3Rebias : 1.0f) / (a.int4 ? float(d) : 1.0f);
  cx.c = kscale * kLog2e;
  const bool cap = a.soft_cap > 0;
  if (cap) cx.cap_in = 2.0f * kscale / a.soft_cap * kLog2e, cx.cap_out = a.soft_cap * kLog2e;

  const PackLayout::Group& grp = L.group(s, h, a.num_kv_heads);
  const int64_t tile_bytes = L.k_tile_bytes + L.v_tile_bytes;
  if (short_range) {
    const QRows qrows = q_in_place ? QRows{static_cast<const uint16_t*>(a.q) + tok0 * a.q_tok_stride + int64_t(h) * g * a.q_head_stride,
                                           g, a.q_tok_stride, a.q_head_stride}
                                   : QRows{sc.qb.data(), 1, int64_t(d), int64_t(d)};
    run_short(a, L, it, cx, qrows, rows, rp, buf + grp.offset, grp.tile0, kb, ke);
    store_rows(a, cx, rows, tok0, h);
    return;
  }
  std::fill(sc.o.begin(), sc.o.end(), 0.0f), std::fill(sc.lsum.begin(), sc.lsum.end(), 0.0f);
  std::fill(sc.m2.begin(), sc.m2.end(), kMasked), std::fill(sc.alpha.begin(), sc.alpha.end(), 1.0f);
  const int nvd = dvp / 16;
  if (amx) cx.s = sc.s.data(), amx_begin();
  const int32_t t_first = kb / kTileKeys, t_end = (ke + kTileKeys - 1) / kTileKeys;
  const int prefetch_step = (rows + (t_end - t_first) - 1) / std::max(1, t_end - t_first);  // rows per key tile
  for (int32_t t = t_first; t < t_end; ++t) {
    const int32_t key0 = t * kTileKeys;
    prefetch_rows(a, it, rows, (t - t_first) * prefetch_step, (t - t_first + 1) * prefetch_step);
    const char* kt = buf + grp.offset + int64_t(t - grp.tile0) * tile_bytes;
    const char* vt = kt + L.k_tile_bytes;
    if (L.token) cx.ks = reinterpret_cast<const float*>(kt + L.k_scales_offset), cx.vs = reinterpret_cast<const float*>(vt + L.v_scales_offset);
    if (amx) {
      amx_key_tile(a, L, cx, sc, rows, rp, kt, vt, key0);
      continue;
    }
    const int j0 = (std::max(kb, key0) - key0) / 16;
    const int j1 = (std::min(ke, key0 + kTileKeys) - key0 + 15) / 16;
    const int32_t first = key0 + j0 * 16, last = key0 + j1 * 16 - 1;
    for (int r0 = 0; r0 < rp; r0 += R) {
      // Rows grow in position, so the micro-tile's tightest bounds are its first row's last
      // key and its last row's first key.
      const bool mask = sc.hi[std::size_t(r0)] < last || sc.lo[std::size_t(r0 + R - 1)] > first;
      kQk[cap][mask][j1 - j0 - 1](cx, r0, kt, j0, key0);
    }
    const bool nonfinite_v = vt[L.v_tile_bytes - kVFlagBytes] != 0;
    for (int r0 = 0; r0 < rp; r0 += R) {
      if (nonfinite_v && (sc.hi[std::size_t(r0)] < last || sc.lo[std::size_t(r0 + R - 1)] > first)) {
        pv_guarded<Bf16>(cx, r0, vt, key0, j0 * 16, j1 * 16);
        continue;
      }
      for (int c0 = 0; c0 < nvd; c0 += 4) kPv[std::min(4, nvd - c0) - 1](cx, r0, vt, c0, j0 * 16, j1 * 16);
    }
  }

  if (amx) amx_end();
  store_rows(a, cx, rows, tok0, h);
}

}  // namespace

void run_item_avx512(const KernelArgs& a, const PackLayout& layout, const WorkItem& it, const char* buf) {
  if (layout.bf16)
    run<true>(a, layout, it, buf);
  else
    run<false>(a, layout, it, buf);
}

void reserve_tile_scratch_avx512(const KernelArgs& a, const PackLayout& L, int rows) {
  // What run() sizes for an item of `rows` rows (R rows per micro-tile, 16 per AMX group).
  const int row_block = L.amx ? 16 : R;
  const std::size_t rp = std::size_t((rows + row_block - 1) / row_block * row_block), d = std::size_t(L.head_size);
  Scratch& sc = scratch();
  sc.o.reserve(rp * std::size_t(L.dv_pad)), sc.lsum.reserve(rp * 16);
  sc.m2.reserve(rp), sc.alpha.reserve(rp), sc.lo.reserve(rp), sc.hi.reserve(rp);
  if (L.bf16) {
    sc.qb.reserve(rp * d), sc.pb.reserve(rp * kTileKeys);
    if (L.amx) sc.s.reserve(rp * kTileKeys), sc.vclean.reserve(std::size_t(kTileKeys) * L.dv_pad);
  } else {
    sc.qf.reserve(rp * d), sc.pf.reserve(rp * kTileKeys);
  }
}

void set_stage_mask_for_measurement(unsigned mask) { g_stage_mask = mask; }
unsigned stage_mask_for_measurement() { return g_stage_mask; }

}  // namespace attn::cpu_flash::prefill
