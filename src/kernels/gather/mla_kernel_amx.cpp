// AMX build of the MLA attend kernel (latent caches stored as bf16 or fp8, both exact in bf16).
// A portable file: the AMX/AVX-512 code lives in functions with a target attribute and runs only
// after the CPU layer (src/cpu/isa.cpp) has checked the CPU and obtained the kernel's permission for tile data.
//
// Per chunk of 32 cache entries (read from DRAM once: each key pair is packed into the V pair
// tiles, and into a bf16 key buffer unless the chunk is contiguous bf16, whose K tiles are then
// loaded in place) and per group of 16 query rows (heads):
//   Sᵀ[32 keys][16 rows] = K[32][width] · Qᵀ   TDPBF16PS, A = the keys as stored, B = q packed
//                                              once per call as bf16 pairs along d
//   online softmax in fp32 (AVX-512): rows are the 16 lanes, so per-row max/sum are lane-wise
//   O[16 rows][rank] += P[16][32] · V[32][rank] TDPBF16PS, A = P (bf16, transposed from Sᵀ),
//                                              B = the entries' latent part packed as key pairs
// q is split into bf16 hi + lo parts when it is not exactly bf16 (f32 / f16 I/O), and then P is
// split the same way (a second P·V product), so those callers keep fp32-like accuracy.
// A masked key is a zero in P, and 0 · NaN is NaN inside a tile product: a chunk whose V holds
// inf / NaN (poisoned or unwritten slots) runs the tile product on zeros in their place and adds
// them back only to the rows that see those keys.
// Packing (entries, q) and the held non-finite V values are in mla_kernel_amx_pack.inl.
#include "kernels/gather/mla_kernel.hpp"

#if defined(__x86_64__) && defined(__linux__)
#include "cpu/x86_intrinsics.hpp"  // GCC 12's false uninitialized warnings off

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "attn/numeric.hpp"
#include "kernels/gather/mla_avx512_math.hpp"

#define ATTN_AMX_TARGET \
  __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))

namespace attn::mla {
namespace {

constexpr int kKeys = 32;  // keys per chunk: the K dimension of one P·V tile product
constexpr int kRows = 16;  // query rows per group: the M / N dimension of a tile
constexpr int kTile = 512; // bf16 elements in one 16 × 64-byte tile

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

#include "kernels/gather/mla_kernel_amx_pack.inl"

struct Scratch {
  std::vector<uint16_t> k, v, q, p, plo, held;
  std::vector<float> s, acc, m, l, alpha;
  std::vector<int32_t> lim, group_limit;
};

ATTN_AMX_TARGET void attend_amx_impl(const AttendArgs& a) {
  thread_local Scratch sc;
  const int W = a.width, R = a.rank, wp = (W + 31) / 32 * 32, KD = wp / 32;
  const int G = (a.rows + kRows - 1) / kRows, GR = G * kRows;
  const float q_mul = a.q_mul > 0.0f ? a.q_mul : 1.0f;

  // q → bf16 pair tiles per group: [G][hi, lo][KD] tiles, tile row i = d pair, column = row r.
  uint16_t* qp = aligned(sc.q, size_t(G) * 2 * KD * kTile);
  const bool need_lo = pack_q(a.q, a.rows, W, 1.0f / q_mul, G, KD, qp);

  // Running state, padded to whole groups; acc holds Σ p·V of the stored (unscaled) values.
  float* acc = aligned(sc.acc, size_t(GR) * R);
  float* m = aligned(sc.m, GR);
  float* l = aligned(sc.l, GR);
  float* alpha = aligned(sc.alpha, GR);
  int32_t* lim = aligned(sc.lim, GR);
  const float inv_scale = 1.0f / a.kv_scale;
  for (int row = 0; row < GR; ++row) {
    const bool real = row < a.rows;
    m[row] = real ? a.m[row] : -INFINITY;
    l[row] = real ? a.l[row] : 0.0f;
    lim[row] = real ? std::clamp(a.row_limit[row], 0, a.num_keys) : 0;
    float* dst = acc + size_t(row) * R;
    if (real) {
      for (int c = 0; c < R; ++c) dst[c] = a.acc[size_t(row) * R + c] * inv_scale;
    } else {
      std::fill(dst, dst + R, 0.0f);
    }
  }
  int32_t* group_limit = aligned(sc.group_limit, G);
  std::fill(group_limit, group_limit + G, 0);
  int max_limit = 0;
  for (int row = 0; row < GR; ++row) {
    group_limit[row / kRows] = std::max(group_limit[row / kRows], lim[row]);
    max_limit = std::max(max_limit, lim[row]);
  }

  uint16_t* kbuf = aligned(sc.k, size_t(kKeys) * wp);
  uint16_t* vp = aligned(sc.v, size_t(kKeys) * R);
  uint16_t* pbuf = aligned(sc.p, size_t(kRows) * kKeys);
  uint16_t* plobuf = aligned(sc.plo, size_t(kRows) * kKeys);  // P's bf16 residue (f32 / f16 I/O)
  uint16_t* held = aligned(sc.held, size_t(kKeys) * R);        // a chunk's non-finite V rows
  float* sbuf = aligned(sc.s, size_t(kKeys) * kRows);
  const __m512 smul = _mm512_set1_ps(q_mul * a.kv_scale);
  const int64_t ld_acc = int64_t(R) * 4;
  const int64_t entry_bytes = a.kv->token_stride * 2;
  // Scores may read K tiles straight from the cache when a chunk's 32 bf16 entries are
  // consecutive in one block and rows need no padding: no copy, only the V pairs are packed.
  const bool direct_ok = a.kv->dtype == DType::bfloat16 && W % 32 == 0;

  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  _tile_loadconfig(&cfg);

  // Entry addresses of this chunk. No software prefetch: entries are long contiguous runs (a
  // block is 64 × 1152 bytes) that the hardware streamer already fetches; measured, prefetching
  // 18 lines per entry only stalled.
  const uint8_t* cur[kKeys];
  for (int c0 = 0; c0 < max_limit; c0 += kKeys) {
    const int n = std::min(kKeys, max_limit - c0);
    for (int j = 0; j < n; ++j) cur[j] = entry_ptr(*a.kv, a.slots[c0 + j]);
    bool direct = direct_ok && n == kKeys;
    for (int j = 1; j < n && direct; ++j) direct = cur[j] == cur[0] + j * entry_bytes;
    const uint16_t* kbase = direct ? reinterpret_cast<const uint16_t*>(cur[0]) : kbuf;
    const int64_t ld_k = direct ? entry_bytes : int64_t(wp) * 2;
    unsigned bad_v = 0;  // bit t: entry t's V part holds inf / NaN
    for (int i = 0; i < kKeys / 2; ++i)
      bad_v |= pack_pair(a.kv->dtype, 2 * i < n ? cur[2 * i] : nullptr, 2 * i + 1 < n ? cur[2 * i + 1] : nullptr, W, wp, R,
                kbuf + size_t(2 * i) * wp, vp + size_t(i) * R * 2, !direct) << (2 * i);
    if (bad_v) hold_nonfinite(vp, bad_v, R, held);

    for (int g = 0; g < G; ++g) {
      if (group_limit[g] <= c0) continue;
      const uint16_t* qg = qp + size_t(g) * 2 * KD * kTile;
      const bool two = n > 16;
      _tile_zero(0);
      _tile_zero(1);
      for (int kd = 0; kd < KD; ++kd) {
        _tile_loadd(2, kbase + kd * 32, ld_k);
        _tile_loadd(4, qg + size_t(kd) * kTile, 64);
        _tile_dpbf16ps(0, 2, 4);
        if (two) {
          _tile_loadd(3, reinterpret_cast<const uint8_t*>(kbase) + 16 * ld_k + kd * 64, ld_k);
          _tile_dpbf16ps(1, 3, 4);
        }
        if (need_lo) {
          _tile_loadd(5, qg + size_t(KD + kd) * kTile, 64);
          _tile_dpbf16ps(0, 2, 5);
          if (two) _tile_dpbf16ps(1, 3, 5);
        }
      }
      _tile_stored(0, sbuf, 64);
      if (two) _tile_stored(1, sbuf + 16 * kRows, 64);

      // Online softmax, base 2, lanes = rows. Keys past a row's limit (causal) are masked.
      const __m512i limv = _mm512_sub_epi32(_mm512_load_si512(lim + g * kRows), _mm512_set1_epi32(c0));
      const __m512 m_old = _mm512_load_ps(m + g * kRows);
      __m512 mx = m_old;
      for (int t = 0; t < n; ++t) {
        const __mmask16 valid = _mm512_cmpgt_epi32_mask(limv, _mm512_set1_epi32(t));
        const __m512 s = _mm512_mask_blend_ps(valid, _mm512_set1_ps(-INFINITY), _mm512_mul_ps(_mm512_load_ps(sbuf + t * kRows), smul));
        _mm512_store_ps(sbuf + t * kRows, s);
        mx = _mm512_max_ps(mx, s);
      }
      const __mmask16 had = _mm512_cmp_ps_mask(m_old, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
      const __m512 al = _mm512_maskz_mov_ps(had, simd::exp2_ps(_mm512_sub_ps(m_old, mx)));
      const __mmask16 live = _mm512_cmp_ps_mask(mx, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
      __m512 sum = _mm512_setzero_ps();
      __m512i pairs[16], lo_pairs[16];
      alignas(64) static const uint16_t mix_idx[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
      const __m512i mix = _mm512_load_si512(mix_idx);
      for (int i = 0; i < kKeys / 2; ++i) {
        __m512 p2[2];
        for (int e = 0; e < 2; ++e) {
          const int t = 2 * i + e;
          p2[e] = _mm512_setzero_ps();
          if (t < n) {
            const __m512 s = _mm512_load_ps(sbuf + t * kRows);
            const __mmask16 ok = live & _mm512_cmp_ps_mask(s, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
            p2[e] = _mm512_maskz_mov_ps(ok, simd::exp2_ps(_mm512_sub_ps(s, mx)));
            sum = _mm512_add_ps(sum, p2[e]);
          }
        }
        // Lane r: the bf16 pair (p[2i][r], p[2i+1][r]); transposed below into P rows.
        const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(p2[1], p2[0]);
        pairs[i] = _mm512_permutexvar_epi16(mix, h);
        if (need_lo) {
          const __m512 r0 = _mm512_sub_ps(p2[0], bf16_hi_as_f32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h))));
          const __m512 r1 = _mm512_sub_ps(p2[1], bf16_hi_as_f32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1))));
          lo_pairs[i] = _mm512_permutexvar_epi16(mix, (__m512i)_mm512_cvtne2ps_pbh(r1, r0));
        }
      }
      simd::transpose16(pairs);
      for (int r = 0; r < kRows; ++r) _mm512_store_si512(pbuf + r * kKeys, pairs[r]);
      if (need_lo) {
        simd::transpose16(lo_pairs);
        for (int r = 0; r < kRows; ++r) _mm512_store_si512(plobuf + r * kKeys, lo_pairs[r]);
      }
      _mm512_store_ps(l + g * kRows, _mm512_fmadd_ps(_mm512_load_ps(l + g * kRows), al, sum));
      _mm512_store_ps(m + g * kRows, mx);
      _mm512_store_ps(alpha, al);
      for (int r = 0; r < kRows; ++r) {
        if (alpha[r] == 1.0f || !((had >> r) & 1)) continue;  // unchanged max, or nothing accumulated yet
        float* row = acc + size_t(g * kRows + r) * R;
        const __m512 va = _mm512_set1_ps(alpha[r]);
        for (int c = 0; c < R; c += 16) _mm512_store_ps(row + c, _mm512_mul_ps(_mm512_load_ps(row + c), va));
      }

      float* ag = acc + size_t(g) * kRows * R;
      _tile_loadd(5, pbuf, 64);
      if (need_lo) _tile_loadd(4, plobuf, 64);
      for (int c = 0; c + 32 <= R; c += 32) {
        _tile_loadd(0, ag + c, ld_acc);
        _tile_loadd(1, vp + 2 * c, ld_acc);
        _tile_loadd(2, ag + c + 16, ld_acc);
        _tile_loadd(3, vp + 2 * c + 32, ld_acc);
        _tile_dpbf16ps(0, 5, 1);
        _tile_dpbf16ps(2, 5, 3);
        if (need_lo) {
          _tile_dpbf16ps(0, 4, 1);
          _tile_dpbf16ps(2, 4, 3);
        }
        _tile_stored(0, ag + c, ld_acc);
        _tile_stored(2, ag + c + 16, ld_acc);
      }
      if (bad_v) add_nonfinite(pbuf, need_lo ? plobuf : nullptr, bad_v, held, lim + g * kRows, c0, R, ag);
    }
  }
  _tile_release();

  for (int row = 0; row < a.rows; ++row) {
    a.m[row] = m[row];
    a.l[row] = l[row];
    const float* src = acc + size_t(row) * R;
    for (int c = 0; c < R; ++c) a.acc[size_t(row) * R + c] = src[c] * a.kv_scale;
  }
}

void attend_amx_entry(const AttendArgs& a) {
  if (amx_handles(a)) {
    attend_amx_impl(a);
  } else {
    attend_avx512()(a);
  }
}

}  // namespace

bool amx_handles(const AttendArgs& a) {
  return amx_handles_storage(a.kv->dtype) && !a.kv->ds_mla && a.v_offset < 0 && a.k_offset == 0 && a.rank % 32 == 0 && a.rank <= a.width &&
         std::isfinite(a.kv_scale) && a.kv_scale > 0.0f;
}

AttendFn attend_amx() { return &attend_amx_entry; }

}  // namespace attn::mla

#else

namespace attn::mla {
bool amx_handles(const AttendArgs&) { return false; }
AttendFn attend_amx() { return nullptr; }
}  // namespace attn::mla

#endif
