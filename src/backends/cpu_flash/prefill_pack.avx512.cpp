// Prefill path, pack phase: one 64-key tile of one (sequence, KV head) from the paged cache into
// the layouts the micro-kernels stream with unit-stride vector loads. Runs once per call per
// tile, so the cache's dtype, paging and head stride are paid for once, not once per query tile.
//
// Layouts (d = head size, dvp = V dims rounded up to 16; bf16 tiles / fp32 tiles):
//   K bf16: [d/2][64 keys][2]   the pair (d, d+1) of 16 consecutive keys fills one vector, the
//                               operand layout of vdpbf16ps against a broadcast q pair
//   V bf16: [32 key pairs][dvp][2]  keys 2i and 2i+1 interleaved per dim (VNNI), against a
//                               broadcast pair of P
//   K fp32: [d][64 keys]        16 keys per vector against a broadcast q element
//   V fp32: [64 keys][dvp]      rows as in the cache, padded
// Keys at or past the sequence length and dims past dv are zeros: a masked key then multiplies
// a zero weight by a finite zero, never by cache contents (NaN poison stays out).
#define ATTN_CF_NS prefill_avx512
#include "kernels/simd/simd_avx512.hpp"
#include "backends/cpu_flash/prefill.hpp"
#include "backends/cpu_flash/hadamard_simd.hpp"
#include "backends/cpu_flash/int4_unpack.hpp"
#include "backends/cpu_flash/nvfp4_unpack.hpp"
#include "backends/cpu_flash/turboquant_unpack.hpp"

#include <algorithm>
#include <cstring>

namespace attn::cpu_flash::prefill {
namespace {

using Simd = ATTN_CF_NS::Simd;

/// One cache row as fp32 (e4m3 keeps its 2^-8, see kE4m3Rebias), zero-padded to `npad`.
template <KvType T>
void widen(const char* src, int n, int npad, float* dst) {
  int x = 0;
  for (; x + 16 <= n; x += 16) _mm512_storeu_ps(dst + x, Simd::load_kv<T>(src + x * kv_bytes<T>()));
  if (x < n) _mm512_storeu_ps(dst + x, Simd::load_kv_tail<T>(src + x * kv_bytes<T>(), n - x)), x += 16;
  for (; x < npad; x += 16) _mm512_storeu_ps(dst + x, _mm512_setzero_ps());
}

/// Whether any of the n floats (a multiple of 16) is a NaN or an infinity.
inline bool any_nonfinite(const float* v, int n) {
  __mmask16 m = 0;
  for (int x = 0; x < n; x += 16) m |= _mm512_fpclass_ps_mask(_mm512_load_ps(v + x), 0x99);  // QNaN, SNaN, ±Inf
  return m != 0;
}

/// Whether any of the n bf16 values (a multiple of 32, 64-byte aligned) is a NaN or an infinity.
inline bool any_nonfinite_bf16(const uint16_t* v, int n) {
  const __m512i exp = _mm512_set1_epi16(0x7f80);
  __mmask32 m = 0;
  for (int x = 0; x < n; x += 32) m |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(_mm512_load_si512(v + x), exp), exp);
  return m != 0;
}

/// 16 rows of 16 dwords transposed in registers: v[c] becomes column c (unpacks of 32 and 64 bits
/// within 128-bit lanes, then two rounds of lane shuffles).
inline void transpose_16x16(__m512i v[16]) {
  __m512i t[16], u[16];
  for (int k = 0; k < 8; ++k)
    t[2 * k] = _mm512_unpacklo_epi32(v[2 * k], v[2 * k + 1]), t[2 * k + 1] = _mm512_unpackhi_epi32(v[2 * k], v[2 * k + 1]);
  for (int k = 0; k < 4; ++k) {  // u[4k + c], lane L: rows 4k .. 4k + 3 at column 4L + c
    u[4 * k + 0] = _mm512_unpacklo_epi64(t[4 * k], t[4 * k + 2]), u[4 * k + 1] = _mm512_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
    u[4 * k + 2] = _mm512_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]), u[4 * k + 3] = _mm512_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512i p = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44), q = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
    const __m512i p2 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xEE), q2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xEE);
    v[c] = _mm512_shuffle_i32x4(p, q, 0x88), v[4 + c] = _mm512_shuffle_i32x4(p, q, 0xDD);
    v[8 + c] = _mm512_shuffle_i32x4(p2, q2, 0x88), v[12 + c] = _mm512_shuffle_i32x4(p2, q2, 0xDD);
  }
}

/// A bf16 HND_PAIRS cache already holds the bf16 tiles' element order (K[d/2][t][2],
/// V[t/2][d][2]): the tile is copied 16 keys at a time (a block is a multiple of 16 keys), keys
/// at or past the sequence length are zeros, as in pack().
void pack_pairs_bf16(const KernelArgs& a, const PackLayout& L, const PackLayout::Job& job, char* kdst, char* vdst, int n) {
  const int d = a.head_size, dv = a.head_size_v, dvp = L.dv_pad;
  const int32_t key0 = job.tile * kTileKeys;
  const int32_t* bt = a.block_table + int64_t(job.seq) * a.max_blocks_per_seq;
  const uint16_t* base = static_cast<const uint16_t*>(a.kv.base);
  uint32_t* kd = reinterpret_cast<uint32_t*>(kdst);
  uint16_t* vd = reinterpret_cast<uint16_t*>(vdst);
  std::memset(kdst, 0, std::size_t(d / 2) * kTileKeys * 4);
  std::memset(vdst, 0, std::size_t(kTileKeys) * dvp * 2);
  for (int j0 = 0; j0 < n; j0 += 16) {
    const int32_t key = key0 + j0;
    const int64_t b = bt[key / a.kv.block_size], t0 = key % a.kv.block_size;
    const int keys = std::min(16, n - j0);
    for (int i = 0; i < d / 2; ++i)  // pair i of keys t0..t0+keys-1: contiguous 32-bit pairs
      std::memcpy(kd + int64_t(i) * kTileKeys + j0, base + kv_element_offset(a.kv, b, t0, job.kv_head, 2 * i, false),
                  std::size_t(keys) * 4);
    for (int p = 0; p < (keys + 1) / 2; ++p) {  // key pair (j0/2 + p): one contiguous row of 2·dv
      const uint16_t* src = base + kv_element_offset(a.kv, b, t0 + 2 * p, job.kv_head, 0, true);
      uint16_t* dst = vd + (int64_t(j0 / 2 + p) * dvp) * 2;
      if (2 * p + 1 < keys) {
        std::memcpy(dst, src, std::size_t(2 * dv) * 2);
      } else {
        for (int x = 0; x < dv; ++x) dst[2 * x] = src[2 * x];  // the pair's second key is past the end
      }
    }
  }
  uint8_t* nonfinite = reinterpret_cast<uint8_t*>(vdst + L.v_tile_bytes - kVFlagBytes);
  *nonfinite = any_nonfinite_bf16(vd, kTileKeys * dvp) ? 1 : 0;  // 32 key pairs × dvp dims × 2
}

/// 16 int4 code bytes as 16 bf16 pairs (low nibble − z_lo, high nibble − z_hi): exact, |code − z|
/// <= 15. Both HND_PAIRS runs hold the bf16 tiles' pair order already: a K byte is dims (2i,
/// 2i + 1) of one key, a V byte one dim of keys (2p, 2p + 1).
inline __m512i int4_pairs_bf16(__m128i bytes, __m512i z_lo, __m512i z_hi) {
  const __m512i x = _mm512_cvtepu8_epi32(bytes);
  const __m512i lo = _mm512_castps_si512(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0xF)), z_lo)));
  const __m512i hi = _mm512_castps_si512(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(x, 4), z_hi)));
  return _mm512_ternarylogic_epi32(_mm512_srli_epi32(lo, 16), hi, _mm512_set1_epi32(int(0xFFFF0000u)), 0xF8);  // lo | (hi & mask)
}

/// An int4_per_token_head HND_PAIRS cache into the bf16 tiles (codes − zero point; the scales are
/// stored beside them by pack()): K 16 keys × one dim pair per step, V one key pair's row per
/// step, keys at or past the sequence length zeros.
void pack_pairs_int4(const KernelArgs& a, const PackLayout& L, const PackLayout::Job& job, char* kdst, char* vdst, int n) {
  const int d = a.head_size, dv = a.head_size_v, dvp = L.dv_pad, bs = a.kv.block_size;
  const int32_t key0 = job.tile * kTileKeys;
  const int32_t* bt = a.block_table + int64_t(job.seq) * a.max_blocks_per_seq;
  alignas(64) int32_t zk[kTileKeys], zv[kTileKeys];  // each key's K and V zero point
  for (int j = 0; j < n; ++j) {
    const int32_t key = key0 + j;
    const int64_t ti = token_scale_index(a.kv, bt[key / bs], key % bs, job.kv_head);
    zk[j] = int4_head::zero_point(a.kv.k_token_scales[ti]), zv[j] = int4_head::zero_point(a.kv.v_token_scales[ti]);
  }
  uint32_t* kd = reinterpret_cast<uint32_t*>(kdst);
  uint32_t* vd = reinterpret_cast<uint32_t*>(vdst);  // one bf16 pair (two keys) per dim
  std::memset(kdst, 0, std::size_t(d / 2) * kTileKeys * 4);
  std::memset(vdst, 0, std::size_t(kTileKeys) * dvp * 2);
  for (int j0 = 0; j0 < n;) {  // runs of up to 16 keys inside one block
    const int32_t key = key0 + j0;
    const int64_t b = bt[key / bs], t0 = key % bs;
    const int keys = int(std::min<int64_t>({16, n - j0, bs - t0}));
    const __mmask16 m = __mmask16((1u << keys) - 1);
    const __m512i z = _mm512_maskz_loadu_epi32(m, zk + j0);
    const uint8_t* run = int4_head::pairs_run(a.kv, b, job.kv_head, false) + t0;
    for (int i = 0; i < d / 2; ++i)
      _mm512_mask_storeu_epi32(kd + int64_t(i) * kTileKeys + j0, m, int4_pairs_bf16(_mm_maskz_loadu_epi8(m, run + int64_t(i) * bs), z, z));
    j0 += keys;
  }
  for (int j = 0; j < n; j += 2) {  // a key pair never straddles a block (even block sizes)
    const int32_t key = key0 + j;
    const int64_t b = bt[key / bs], t = key % bs;
    const uint8_t* row = int4_head::pairs_run(a.kv, b, job.kv_head, true) + (t >> 1) * 2 * a.kv.token_stride;
    const __m512i z_lo = _mm512_set1_epi32(zv[j]), z_hi = _mm512_set1_epi32(j + 1 < n ? zv[j + 1] : 0);
    // The pair's second key past the end keeps its half zero.
    const __m512i keep = _mm512_set1_epi32(j + 1 < n ? -1 : 0xFFFF);
    for (int x = 0; x < dv; x += 16) {
      const __mmask16 m = __mmask16(dv - x >= 16 ? 0xFFFF : (1u << (dv - x)) - 1);
      const __m512i w = _mm512_and_si512(int4_pairs_bf16(_mm_maskz_loadu_epi8(m, row + x), z_lo, z_hi), keep);
      _mm512_mask_storeu_epi32(vd + int64_t(j / 2) * dvp + x, m, w);
    }
  }
}

template <KvType T>
void pack(const KernelArgs& a, const PackLayout& L, const PackLayout::Job& job, char* buf) {
  const PackLayout::Group& g = L.group(job.seq, job.kv_head, a.num_kv_heads);
  char* kdst = buf + g.offset + int64_t(job.tile - g.tile0) * (L.k_tile_bytes + L.v_tile_bytes);
  char* vdst = kdst + L.k_tile_bytes;
  const int d = a.head_size, dv = a.head_size_v, dvp = L.dv_pad;
  const int32_t key0 = job.tile * kTileKeys;
  const int n = std::clamp(a.seq_lens[job.seq] - key0, 0, kTileKeys);
  if constexpr (T == KvType::bf16) {
    if (a.kv.layout == KVLayout::HND_PAIRS && L.bf16 && !a.int4) return pack_pairs_bf16(a, L, job, kdst, vdst, n);
  }
  const int32_t* bt = a.block_table + int64_t(job.seq) * a.max_blocks_per_seq;
  const char* base = static_cast<const char*>(a.kv.base);
  // Key j's K or V row: in place where rows are contiguous, gathered for HND_PAIRS (the
  // pointer is valid until the next call).
  alignas(64) char gathered[kMaxPackDims * sizeof(float)];
  const ATTN_CF_NS::TqCentroids tq_centroids = a.turboquant ? ATTN_CF_NS::TqCentroids(d, a.kv.tq) : ATTN_CF_NS::TqCentroids();
  auto src_row = [&](int j, bool is_v) -> const char* {
    const int32_t key = key0 + j;
    const int64_t b = bt[key / a.kv.block_size], t = key % a.kv.block_size;
    if constexpr (T == KvType::bf16)
      if (a.int4) {  // codes − zero point as a bf16 row (the scale is the slot's, below)
        uint8_t codes[kMaxPackDims / 2];
        const int n_el = is_v ? dv : d;
        const float stored = (is_v ? a.kv.v_token_scales : a.kv.k_token_scales)[token_scale_index(a.kv, b, t, job.kv_head)];
        int4_head::load_vector(a.kv, b, t, job.kv_head, is_v, n_el, codes);
        ATTN_CF_NS::unpack_int4(codes, n_el, int4_head::zero_point(stored), reinterpret_cast<uint16_t*>(gathered));
        return gathered;
      }
    if constexpr (T == KvType::bf16)
      if (a.kv.nvfp4) {  // e2m1 · block scale as a bf16 row (the global scale is the tile's)
        ATTN_CF_NS::unpack_nvfp4(reinterpret_cast<const uint8_t*>(base) + kv_element_offset(a.kv, b, t, job.kv_head, 0, is_v),
                                 is_v ? dv : d, reinterpret_cast<uint16_t*>(gathered));
        return gathered;
      }
    if constexpr (T == KvType::f32)
      if (a.turboquant) {  // the slot's key (rotated, or fp8 values) or value as an fp32 row
        const uint8_t* p = reinterpret_cast<const uint8_t*>(base) + kv_element_offset(a.kv, b, t, job.kv_head, 0, is_v);
        if (is_v)
          ATTN_CF_NS::unpack_tq_value(p, dv, a.kv.tq, reinterpret_cast<float*>(gathered));
        else
          ATTN_CF_NS::unpack_tq_key(p, d, a.kv.tq, tq_centroids, reinterpret_cast<float*>(gathered));
        // bf16 tiles: the key rotated back (rotate is its own inverse), so q needs no rotation
        // and no second rounding to bf16.
        if (!is_v && L.bf16 && !a.kv.tq.key_fp8()) turboquant::rotate(reinterpret_cast<float*>(gathered), d, &ATTN_CF_NS::hadamard_simd);
        return gathered;
      }
    if (a.kv.layout != KVLayout::HND_PAIRS) return base + kv_element_offset(a.kv, b, t, job.kv_head, 0, is_v) * kv_bytes<T>();
    gather_kv_vector(a.kv, b, t, job.kv_head, is_v, is_v ? dv : d, gathered);
    return gathered;
  };
  const int dpad = (d + 31) / 32 * 32;  // whole bf16 vectors of 32
  // Per-token-head caches: a key's slot scale (0 past the sequence). fp32 tiles multiply each row
  // by it; bf16 tiles keep the codes and store the scales beside them (PackLayout::token).
  auto slot_scale = [&](int j, bool is_v) -> float {
    if (j >= n) return 0.0f;
    const int32_t key = key0 + j;
    const int64_t ti = token_scale_index(a.kv, bt[key / a.kv.block_size], key % a.kv.block_size, job.kv_head);
    const float stored = (is_v ? a.kv.v_token_scales : a.kv.k_token_scales)[ti];
    return a.int4 ? int4_head::scale_of(stored) : stored;
  };
  auto scale_row = [&](int j, bool is_v, float* r, int n_el) {
    if (!a.token_scales) return;
    const float sc = slot_scale(j, is_v);
    for (int x = 0; x < n_el; ++x) r[x] *= sc;
  };
  alignas(64) float row[kMaxPackDims], row2[kMaxPackDims];
  uint8_t* nonfinite = reinterpret_cast<uint8_t*>(vdst + L.v_tile_bytes - kVFlagBytes);
  *nonfinite = 0;

  if (L.token) {
    float* ks = reinterpret_cast<float*>(kdst + L.k_scales_offset);
    float* vs = reinterpret_cast<float*>(vdst + L.v_scales_offset);
    bool bad = false;
    for (int j = 0; j < kTileKeys; ++j) ks[j] = slot_scale(j, false), vs[j] = slot_scale(j, true), bad |= !std::isfinite(vs[j]);
    if (bad) *nonfinite = 1;  // a NaN V scale makes its key's weight NaN: masked keys must be skipped
    if constexpr (T == KvType::bf16)
      if (a.int4 && a.kv.layout == KVLayout::HND_PAIRS && L.bf16) return pack_pairs_int4(a, L, job, kdst, vdst, n);
  }
  if (L.bf16) {
    // K: rows to bf16 pairs, 16 keys at a time, then a 32-bit transpose (pairs × keys) in
    // registers. k_split: the hi halves' pairs, then the remainders' (tile pairs d/2 .. d - 1).
    uint32_t* kd = reinterpret_cast<uint32_t*>(kdst);
    const int pairs = L.head_size / 2;
    alignas(64) uint32_t staged[16][kMaxPackDims];  // 16 keys' tile pairs (kMaxPackDims >= 2 · d / 2, rounded to 16)
    for (int j0 = 0; j0 < kTileKeys; j0 += 16) {
      for (int k = 0; k < 16; ++k) {
        const int j = j0 + k;
        uint16_t* hi_row = reinterpret_cast<uint16_t*>(staged[k]);
        uint16_t* lo_row = reinterpret_cast<uint16_t*>(staged[k] + d / 2);
        if (j >= n) {
          std::memset(staged[k], 0, sizeof(staged[k]));
          continue;
        }
        widen<T>(src_row(j, false), d, dpad, row);
        for (int x = 0; x < dpad; x += 32) {
          const __m512 a0 = _mm512_load_ps(row + x), a1 = _mm512_load_ps(row + x + 16);
          const __m512i hi = (__m512i)_mm512_cvtne2ps_pbh(a1, a0);
          _mm512_store_si512(hi_row + x, hi);
        }
        if (L.k_split)  // after the hi pairs: their padding past d / 2 is where the remainders go
          for (int x = 0; x < dpad; x += 32) {
            const __m512 a0 = _mm512_load_ps(row + x), a1 = _mm512_load_ps(row + x + 16);
            const __m512i hi = (__m512i)_mm512_cvtne2ps_pbh(a1, a0);  // again: the stores may have covered its staged copy
            const __m512 h0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(hi)), 16));
            const __m512 h1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(hi, 1)), 16));
            _mm512_storeu_si512(lo_row + x, (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(a1, h1), _mm512_sub_ps(a0, h0)));
          }
      }
      for (int i0 = 0; i0 < pairs; i0 += 16) {  // staged lanes past the pairs land only in columns not stored
        __m512i v[16];
        for (int k = 0; k < 16; ++k) v[k] = _mm512_load_si512(staged[k] + i0);
        transpose_16x16(v);
        for (int i = 0; i < std::min(16, pairs - i0); ++i) _mm512_storeu_si512(kd + int64_t(i0 + i) * kTileKeys + j0, v[i]);
      }
    }
    // V: two keys' rows interleaved by one word permute per 16 dims.
    const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                                21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    uint16_t* vd = reinterpret_cast<uint16_t*>(vdst);
    for (int kp = 0; kp < kTileKeys / 2; ++kp) {
      const int j = 2 * kp;
      if (j < n) widen<T>(src_row(j, true), dv, dvp, row); else std::fill(row, row + dvp, 0.0f);
      if (j + 1 < n) widen<T>(src_row(j + 1, true), dv, dvp, row2); else std::fill(row2, row2 + dvp, 0.0f);
      if (any_nonfinite(row, dvp) || any_nonfinite(row2, dvp)) *nonfinite = 1;
      for (int x = 0; x < dvp; x += 16) {
        const __m512 ab = _mm512_castpd_ps(_mm512_insertf64x4(
            _mm512_castpd256_pd512(_mm256_castsi256_pd((__m256i)_mm512_cvtneps_pbh(_mm512_load_ps(row + x)))),
            _mm256_castsi256_pd((__m256i)_mm512_cvtneps_pbh(_mm512_load_ps(row2 + x))), 1));
        _mm512_store_si512(vd + (int64_t(kp) * dvp + x) * 2, _mm512_permutexvar_epi16(interleave, _mm512_castps_si512(ab)));
      }
    }
    return;
  }
  // fp32 tiles: K transposed to keys-in-lanes, V rows as they are.
  float* kd = reinterpret_cast<float*>(kdst);
  for (int j = 0; j < kTileKeys; ++j) {
    if (j < n) widen<T>(src_row(j, false), d, dpad, row), scale_row(j, false, row, d); else std::fill(row, row + dpad, 0.0f);
    for (int x = 0; x < d; ++x) kd[x * kTileKeys + j] = row[x];
  }
  float* vd = reinterpret_cast<float*>(vdst);
  for (int j = 0; j < kTileKeys; ++j) {
    if (j < n) {
      widen<T>(src_row(j, true), dv, dvp, vd + int64_t(j) * dvp);
      scale_row(j, true, vd + int64_t(j) * dvp, dv);
      if (any_nonfinite(vd + int64_t(j) * dvp, dvp)) *nonfinite = 1;
    } else {
      std::fill(vd + int64_t(j) * dvp, vd + int64_t(j + 1) * dvp, 0.0f);
    }
  }
}

}  // namespace

void pack_tile_avx512(const KernelArgs& a, const PackLayout& layout, const PackLayout::Job& job, char* buf) {
  switch (a.kv_type) {
    case KvType::f32: return pack<KvType::f32>(a, layout, job, buf);
    case KvType::f16: return pack<KvType::f16>(a, layout, job, buf);
    case KvType::bf16: return pack<KvType::bf16>(a, layout, job, buf);
    case KvType::e4m3: return pack<KvType::e4m3>(a, layout, job, buf);
    case KvType::e5m2: return pack<KvType::e5m2>(a, layout, job, buf);
    case KvType::i8: return pack<KvType::i8>(a, layout, job, buf);  // codes exact in bf16 tiles
    case KvType::i4: break;  // int4 caches never take the prefill tiles (plan_pack)
  }
}

}  // namespace attn::cpu_flash::prefill
