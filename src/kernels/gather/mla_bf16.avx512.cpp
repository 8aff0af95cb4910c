// Driver of the AVX512-BF16 attend kernel (layouts in mla_bf16.hpp): per chunk of kKeys cache
// entries, read from memory once for all query rows, it packs the V pairs, computes the scores of
// every head block, runs the online softmax lane-wise in fp32 and accumulates P·V.
//
// Numerics: q is split into bf16 hi + lo when it is not exactly bf16 (f32 / f16 I/O), and then P
// is split the same way, so those callers keep fp32-like accuracy at twice the products; with
// bf16 I/O q is exact and only P is rounded to bf16, its sum taken over the rounded values so the
// weights still sum to one.
// Masking: keys visible to every row of a head block go through the pair products; the few keys
// visible to only some lanes (a causal diagonal, an odd last key) are added in fp32 under a lane
// mask, so a masked lane never multiplies a non-finite value.
// fp8_ds_mla entries: the e4m3 latent widens to bf16 exactly and the tile scales stay fp32 (folded
// into the scores per tile, and into P per tile for P·V, split hi + lo), so no stored value is
// rounded; the rope part is bf16 already.
#if defined(__x86_64__)
#include "cpu/x86_intrinsics.hpp"  // GCC 12's false uninitialized warnings off

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attn/numeric.hpp"
#include "kernels/gather/mla_avx512_math.hpp"
#include "kernels/gather/mla_bf16.hpp"
#include "kernels/gather/mla_kernel.hpp"

namespace attn::mla {
namespace bf16dot {
namespace {

struct Scratch {
  std::vector<uint32_t> q, qlo, vp, pp, plo;
  std::vector<uint16_t> kconv, vconv, zero;
  std::vector<float> s, oacc, m, l, alpha, tile_scales;
  std::vector<int32_t> lim, lo, hi, pairs;
};

template <class T>
T* sized(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

inline const uint8_t* entry_ptr(const PagedKV& kv, int64_t slot, int64_t offset) {
  const int64_t block = slot / kv.block_size, off = slot % kv.block_size;
  return static_cast<const uint8_t*>(kv.base) +
         (block * kv.block_stride + off * kv.token_stride + offset) * int64_t(dtype_size(kv.dtype));
}

inline __m512 widen_lo(__m512i bf16x32) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(bf16x32)), 16));
}
inline __m512 widen_hi(__m512i bf16x32) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(bf16x32, 1)), 16));
}

/// q rows (fp32; times inv_mul recovers the caller's values) → [pair][head block][lane] bf16
/// pairs, hi and lo residue; returns whether any lo is needed. 32 consecutive values of a row are
/// 16 pairs in memory order, so a 16 × 16 transpose of 32-bit pairs turns rows into lanes.
bool pack_q(const float* q, int rows, int width, float inv_mul, int head_blocks, uint32_t* hi, uint32_t* lo) {
  const __m512 vinv = _mm512_set1_ps(inv_mul), tiny = _mm512_set1_ps(0x1p-20f);
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const int pairs = width / 2, GR = head_blocks * kLanes;
  bool need_lo = false;
  for (int hb = 0; hb < head_blocks; ++hb) {
    for (int p0 = 0; p0 < pairs; p0 += 16) {
      const int nd = std::min(32, width - 2 * p0);
      const __mmask16 m0 = nd >= 16 ? __mmask16(0xffff) : __mmask16((1u << nd) - 1);
      const __mmask16 m1 = nd >= 32 ? __mmask16(0xffff) : nd > 16 ? __mmask16((1u << (nd - 16)) - 1) : __mmask16(0);
      __m512i h[16], l[16];
      for (int r = 0; r < kLanes; ++r) {
        const int row = hb * kLanes + r;
        if (row >= rows) {
          h[r] = l[r] = _mm512_setzero_si512();
          continue;
        }
        const float* src = q + size_t(row) * width + 2 * p0;
        const __m512 u0 = _mm512_mul_ps(_mm512_maskz_loadu_ps(m0, src), vinv);
        const __m512 u1 = _mm512_mul_ps(_mm512_maskz_loadu_ps(m1, src + 16), vinv);
        h[r] = (__m512i)_mm512_cvtne2ps_pbh(u1, u0);
        const __m512 e0 = _mm512_sub_ps(u0, widen_lo(h[r])), e1 = _mm512_sub_ps(u1, widen_hi(h[r]));
        // The residue of q · mul / mul (~2^-24 |u|) does not count: bf16 I/O needs no lo part.
        need_lo |= _mm512_cmp_ps_mask(_mm512_and_ps(e0, abs_mask), _mm512_mul_ps(_mm512_and_ps(u0, abs_mask), tiny), _CMP_GT_OQ) != 0;
        need_lo |= _mm512_cmp_ps_mask(_mm512_and_ps(e1, abs_mask), _mm512_mul_ps(_mm512_and_ps(u1, abs_mask), tiny), _CMP_GT_OQ) != 0;
        l[r] = (__m512i)_mm512_cvtne2ps_pbh(e1, e0);
      }
      simd::transpose16(h);
      simd::transpose16(l);
      for (int i = 0; i < 16 && p0 + i < pairs; ++i) {
        _mm512_storeu_si512(hi + size_t(p0 + i) * GR + hb * kLanes, h[i]);
        _mm512_storeu_si512(lo + size_t(p0 + i) * GR + hb * kLanes, l[i]);
      }
    }
  }
  return need_lo;
}

/// Oᵀ [cols][GR] → acc rows [rows][cols] times `mul`, 16 × 16 blocks at a time.
void unpack_acc(const float* oacc, int rows, int cols, int head_blocks, float mul, float* acc) {
  const __m512 vm = _mm512_set1_ps(mul);
  const int GR = head_blocks * kLanes;
  for (int hb = 0; hb < head_blocks; ++hb) {
    for (int c0 = 0; c0 < cols; c0 += 16) {
      __m512i v[16];
      for (int i = 0; i < 16; ++i) v[i] = _mm512_loadu_si512(oacc + size_t(c0 + i) * GR + hb * kLanes);
      simd::transpose16(v);
      for (int r = 0; r < kLanes && hb * kLanes + r < rows; ++r)
        _mm512_storeu_ps(acc + size_t(hb * kLanes + r) * cols + c0, _mm512_mul_ps(_mm512_castsi512_ps(v[r]), vm));
    }
  }
}

inline __m512 bf16_round(__m512 x) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(x)), 16));
}

// Lane r of the result: the bf16 pair (x0[r], x1[r]).
inline __m512i pair_up(__m512 x0, __m512 x1) {
  alignas(64) static const uint16_t mix_idx[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                                   8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  return _mm512_permutexvar_epi16(_mm512_load_si512(mix_idx), (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
}

}  // namespace

bool handles(const AttendArgs& a) {
  const DType d = a.kv->dtype;
  // fp8_ds_mla: the whole MLA entry (latent then rope) as K, its latent as V.
  const bool ds = a.kv->ds_mla && d == DType::fp8_e4m3 && a.k_offset == 0 && a.v_offset < 0 &&
                  a.width == ds_mla::kRank + ds_mla::kRope && a.rank == ds_mla::kRank;
  const bool storage = ds || ((d == DType::bfloat16 || d == DType::fp8_e4m3 || d == DType::fp8_e5m2) && !a.kv->ds_mla);
  const float vs = a.v_offset >= 0 ? a.v_scale : a.kv_scale;
  return storage && a.width % 2 == 0 && a.rank % kLanes == 0 && a.rank > 0 && (a.v_offset >= 0 || a.rank <= a.width) &&
         std::isfinite(a.kv_scale) && a.kv_scale > 0.0f && std::isfinite(vs) && vs > 0.0f;
}

void attend(const AttendArgs& a) {
  thread_local Scratch sc;
  const int W = a.width, R = a.rank, P = W / 2, HB = (a.rows + kLanes - 1) / kLanes, GR = HB * kLanes;
  const float q_mul = a.q_mul > 0.0f ? a.q_mul : 1.0f;
  const bool separate_v = a.v_offset >= 0;
  const float v_scale = separate_v ? a.v_scale : a.kv_scale;
  const DType dt = a.kv->dtype;
  const bool direct = dt == DType::bfloat16, e5m2 = dt == DType::fp8_e5m2, ds = a.kv->ds_mla;
  constexpr int kTiles = ds_mla::kTiles;

  uint32_t* qp = sized(sc.q, size_t(P) * GR);
  uint32_t* ql = sized(sc.qlo, size_t(P) * GR);
  const bool need_lo = pack_q(a.q, a.rows, W, 1.0f / q_mul, HB, qp, ql);

  float* m = sized(sc.m, GR);
  float* l = sized(sc.l, GR);
  float* alpha = sized(sc.alpha, GR);
  int32_t* lim = sized(sc.lim, GR);
  int32_t* lo = sized(sc.lo, HB);
  int32_t* hi = sized(sc.hi, HB);
  int32_t* npairs = sized(sc.pairs, HB);
  int max_limit = 0;
  for (int hb = 0; hb < HB; ++hb) {
    lo[hb] = a.num_keys, hi[hb] = 0;
    for (int r = hb * kLanes; r < std::min(a.rows, (hb + 1) * kLanes); ++r) {
      const int v = std::clamp(a.row_limit[r], 0, a.num_keys);
      lo[hb] = std::min(lo[hb], v), hi[hb] = std::max(hi[hb], v);
    }
    max_limit = std::max(max_limit, hi[hb]);
  }
  float* oacc = sized(sc.oacc, size_t(R) * GR);
  const float inv_v = 1.0f / v_scale;
  bool fresh = true;  // nothing accumulated yet (l = 0): acc is 0 by contract, no transpose in
  for (int r = 0; r < GR; ++r) {
    const bool real = r < a.rows;
    // Padding lanes (q = 0) count as seeing every key of their block, so they never make a block
    // ragged; their results are dropped.
    lim[r] = real ? std::clamp(a.row_limit[r], 0, a.num_keys) : hi[r / kLanes];
    m[r] = real ? a.m[r] : -INFINITY;
    l[r] = real ? a.l[r] : 0.0f;
    fresh &= l[r] == 0.0f;
  }
  if (fresh) {
    std::fill(oacc, oacc + size_t(R) * GR, 0.0f);
  } else {
    for (int r = 0; r < GR; ++r)
      for (int c = 0; c < R; ++c) oacc[size_t(c) * GR + r] = r < a.rows ? a.acc[size_t(r) * R + c] * inv_v : 0.0f;
  }

  const int kmax = std::max(W, R);
  uint16_t* zero = sized(sc.zero, kmax);
  std::fill(zero, zero + kmax, uint16_t(0));
  uint16_t* kconv = direct ? nullptr : sized(sc.kconv, size_t(kKeys) * W);
  uint16_t* vconv = direct || !separate_v ? nullptr : sized(sc.vconv, size_t(kKeys) * R);
  uint32_t* vp = sized(sc.vp, size_t(kKeys / 2) * R);
  // P pairs: one array, or (fp8_ds_mla) one per tile, P times the keys' scales of that tile.
  const int p_arrays = ds ? kTiles : 1;
  const size_t p_size = size_t(kKeys / 2) * GR;
  uint32_t* pp = sized(sc.pp, p_arrays * p_size);
  // fp8_ds_mla splits P·s into bf16 hi + lo as well: one bf16 rounding of P·s per tile, against
  // the rounded P that l sums, loses the cancellation that a single scale keeps (the weights of
  // a tile no longer sum to l's); q stays one bf16 part where it is exact.
  const bool p_lo = need_lo || ds;
  uint32_t* pl = p_lo ? sized(sc.plo, p_arrays * p_size) : nullptr;
  float* sbuf = sized(sc.s, size_t(kKeys) * GR);
  float* ksc = ds ? sized(sc.tile_scales, size_t(kKeys) * kTiles) : nullptr;  // [key][tile]

  const uint16_t* krow[kKeys];
  const uint16_t* vrow[kKeys];
  const char* next[kKeys];
  // An fp8_ds_mla entry (656 bytes) starts anywhere in a line: one more line covers its end.
  const int row_lines = ds ? (ds_mla::kEntryBytes + 63) / 64 + 1 : (W * int(dtype_size(dt)) + 63) / 64;
  const __m512 smul = _mm512_set1_ps(q_mul * a.kv_scale), ninf = _mm512_set1_ps(-INFINITY);

  for (int c0 = 0; c0 < max_limit; c0 += kKeys) {
    const int n = std::min(kKeys, max_limit - c0), nk = (n + 15) / 16 * 16;
    for (int j = 0; j < n; ++j) {
      const uint8_t* k = entry_ptr(*a.kv, a.slots[c0 + j], a.k_offset);
      if (ds) {
        uint16_t* row = kconv + size_t(j) * W;
        fp8_to_bf16(k, false, ds_mla::kRank, row);
        std::memcpy(row + ds_mla::kRank, k + ds_mla::kRopeOffset, ds_mla::kRope * sizeof(uint16_t));
        std::memcpy(ksc + size_t(j) * kTiles, k + ds_mla::kScalesOffset, kTiles * sizeof(float));
        krow[j] = row;
      } else if (direct) {
        krow[j] = reinterpret_cast<const uint16_t*>(k);
      } else {
        fp8_to_bf16(k, e5m2, W, kconv + size_t(j) * W);
        krow[j] = kconv + size_t(j) * W;
      }
      vrow[j] = krow[j];
      if (separate_v) {
        const uint8_t* v = entry_ptr(*a.kv, a.slots[c0 + j], a.v_offset);
        if (direct) {
          vrow[j] = reinterpret_cast<const uint16_t*>(v);
        } else {
          fp8_to_bf16(v, e5m2, R, vconv + size_t(j) * R);
          vrow[j] = vconv + size_t(j) * R;
        }
      }
    }
    for (int j = n; j < nk; ++j) {
      krow[j] = zero;
      if (ds) std::fill_n(ksc + size_t(j) * kTiles, kTiles, 1.0f);
    }
    const int c1 = c0 + kKeys, n1 = std::max(0, std::min(kKeys, max_limit - c1));
    for (int j = 0; j < n1; ++j) next[j] = reinterpret_cast<const char*>(entry_ptr(*a.kv, a.slots[c1 + j], a.k_offset));
    Prefetch pf{next, n1, row_lines};
    const int lines = n1 * row_lines, iters = score_iterations(HB, nk, P) + pv_iterations(HB, R, n / 2);
    pf.every = pf.countdown = std::max(1, iters / std::max(1, lines));
    pack_v_pairs(vrow, n, R, vp);
    score_chunk(qp, need_lo ? ql : nullptr, HB, P, krow, ksc, nk, sbuf, pf);

    for (int hb = 0; hb < HB; ++hb) {
      npairs[hb] = -1;
      if (hi[hb] <= c0) continue;  // no row of this block sees this chunk
      const __m512i limv = _mm512_sub_epi32(_mm512_loadu_si512(lim + hb * kLanes), _mm512_set1_epi32(c0));
      const __m512 m_old = _mm512_loadu_ps(m + hb * kLanes);
      __m512 mx = m_old;
      __mmask16 nan = 0;  // a visible NaN score makes its row NaN (max alone would drop it)
      for (int t = 0; t < n; ++t) {
        float* st = sbuf + (size_t(t) * HB + hb) * kLanes;
        const __mmask16 valid = _mm512_cmpgt_epi32_mask(limv, _mm512_set1_epi32(t));
        const __m512 s = _mm512_mask_mul_ps(ninf, valid, _mm512_loadu_ps(st), smul);
        _mm512_storeu_ps(st, s);
        mx = _mm512_max_ps(mx, s);
        nan |= _mm512_cmp_ps_mask(s, s, _CMP_UNORD_Q);
      }
      mx = _mm512_mask_mov_ps(mx, nan, _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()));
      const __mmask16 had = _mm512_cmp_ps_mask(m_old, ninf, _CMP_NEQ_OQ);
      const __m512 al = _mm512_maskz_mov_ps(had, simd::exp2_ps(_mm512_sub_ps(m_old, mx)));
      const __mmask16 live = _mm512_cmp_ps_mask(mx, ninf, _CMP_NEQ_UQ);  // NaN rows stay live
      const int full = std::clamp(lo[hb] - c0, 0, n), np = full / 2;
      npairs[hb] = np;
      __m512 sum = _mm512_setzero_ps();
      auto prob = [&](int t) {
        if (t >= n) return _mm512_setzero_ps();
        const __m512 s = _mm512_loadu_ps(sbuf + (size_t(t) * HB + hb) * kLanes);
        const __mmask16 ok = live & _mm512_cmp_ps_mask(s, ninf, _CMP_NEQ_UQ);
        return _mm512_maskz_mov_ps(ok, simd::exp2_ps(_mm512_sub_ps(s, mx)));
      };
      for (int i = 0; i < np; ++i) {
        const __m512 p0 = prob(2 * i), p1 = prob(2 * i + 1);
        for (int t = 0; t < p_arrays; ++t) {
          // fp8_ds_mla: P times the key's scale of tile t, rounded to bf16 once.
          const __m512 x0 = ds ? _mm512_mul_ps(p0, _mm512_set1_ps(ksc[size_t(2 * i) * kTiles + t])) : p0;
          const __m512 x1 = ds ? _mm512_mul_ps(p1, _mm512_set1_ps(ksc[size_t(2 * i + 1) * kTiles + t])) : p1;
          const size_t at = t * p_size + (size_t(i) * HB + hb) * kLanes;
          _mm512_storeu_si512(pp + at, pair_up(x0, x1));
          if (p_lo)
            _mm512_storeu_si512(pl + at, pair_up(_mm512_sub_ps(x0, bf16_round(x0)), _mm512_sub_ps(x1, bf16_round(x1))));
        }
        // The row sum of the weights P·V used (unscaled): rounded P, or P itself with the residue.
        sum = _mm512_add_ps(sum, p_lo ? _mm512_add_ps(p0, p1) : _mm512_add_ps(bf16_round(p0), bf16_round(p1)));
      }
      // Keys left for the masked fp32 path keep their fp32 P in the score buffer.
      for (int t = 2 * np; t < std::min(n, hi[hb] - c0); ++t) {
        const __m512 p = prob(t);
        _mm512_storeu_ps(sbuf + (size_t(t) * HB + hb) * kLanes, p);
        sum = _mm512_add_ps(sum, p);
      }
      _mm512_storeu_ps(l + hb * kLanes, _mm512_fmadd_ps(_mm512_loadu_ps(l + hb * kLanes), al, sum));
      _mm512_storeu_ps(m + hb * kLanes, mx);
      _mm512_storeu_ps(alpha + hb * kLanes, al);
    }

    // Runs of head blocks with the same number of shared key pairs go through one call.
    for (int hb = 0; hb < HB;) {
      if (npairs[hb] < 0) {
        ++hb;
        continue;
      }
      int end = hb + 1;
      while (end < HB && npairs[end] == npairs[hb]) ++end;
      if (!ds) {
        pv_chunk(oacc, alpha, HB, hb, end, R, 0, R, pp, pl, vp, npairs[hb], pf);
      } else {
        for (int t = 0; t < kTiles; ++t)
          pv_chunk(oacc, alpha, HB, hb, end, R, t * ds_mla::kTile, (t + 1) * ds_mla::kTile, pp + t * p_size,
                   pl ? pl + t * p_size : nullptr, vp, npairs[hb], pf);
      }
      hb = end;
    }
    for (int hb = 0; hb < HB; ++hb) {
      if (npairs[hb] < 0) continue;
      const __m512i limv = _mm512_sub_epi32(_mm512_loadu_si512(lim + hb * kLanes), _mm512_set1_epi32(c0));
      for (int t = 2 * npairs[hb]; t < std::min(n, hi[hb] - c0); ++t) {
        const __mmask16 valid = _mm512_cmpgt_epi32_mask(limv, _mm512_set1_epi32(t));
        const __m512 p = _mm512_loadu_ps(sbuf + (size_t(t) * HB + hb) * kLanes);
        const uint16_t* v = vrow[t];
        __m512 pc = p;  // P times the column's tile scale (fp8_ds_mla)
        for (int c = 0; c < R; ++c) {
          if (ds && c % ds_mla::kTile == 0) pc = _mm512_mul_ps(p, _mm512_set1_ps(ksc[size_t(t) * kTiles + c / ds_mla::kTile]));
          float* o = oacc + (size_t(c) * HB + hb) * kLanes;
          const __m512 vc = _mm512_set1_ps(bf16_to_f32(v[c]));
          _mm512_storeu_ps(o, _mm512_mask3_fmadd_ps(pc, vc, _mm512_loadu_ps(o), valid));
        }
      }
    }
  }

  for (int r = 0; r < a.rows; ++r) {
    a.m[r] = m[r];
    a.l[r] = l[r];
  }
  unpack_acc(oacc, a.rows, R, HB, v_scale, a.acc);
}

}  // namespace bf16dot

namespace {
void attend_bf16_entry(const AttendArgs& a) {
  if (bf16dot::handles(a)) {
    bf16dot::attend(a);
  } else {
    attend_avx512()(a);
  }
}
}  // namespace

AttendFn attend_avx512_bf16() { return &attend_bf16_entry; }
bool bf16_handles(const AttendArgs& args) { return bf16dot::handles(args); }

}  // namespace attn::mla
#endif
