// The two register-blocked products of the AVX512-BF16 attend kernel (see mla_bf16.hpp).
// Each micro-tile keeps 16 fp32 accumulators live, more than vdpbf16ps's latency × throughput,
// and issues about one load per product: a q (or P) vector shared by the tile's keys (columns)
// and one broadcast bf16 pair per key (column).
#if defined(__x86_64__)
#include "cpu/x86_intrinsics.hpp"

#include <algorithm>
#include <cstring>

#include "kernels/gather/mla_bf16.hpp"

namespace attn::mla::bf16dot {
namespace {

inline __m512bh bcast_pair(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return (__m512bh)_mm512_set1_epi32(int(v));
}

inline __m512bh load_pairs(const uint32_t* p) { return (__m512bh)_mm512_loadu_si512(p); }

// One pair step of both products: acc[j][h] += a[h] · pair(j) for NJ broadcast pairs against NH
// vectors of a (and of a's low halves when LO). Always inlined, so each tile keeps its
// accumulators in registers.
template <int NJ, int NH, bool LO, typename PairAt>
[[gnu::always_inline]] inline void dot_pairs(__m512 (&acc)[NJ][NH], const uint32_t* a, const uint32_t* alo, PairAt pair) {
  __m512bh av[NH], alv[NH];
  for (int h = 0; h < NH; ++h) {
    av[h] = load_pairs(a + h * kLanes);
    if constexpr (LO) alv[h] = load_pairs(alo + h * kLanes);
  }
#pragma GCC unroll 16
  for (int j = 0; j < NJ; ++j) {
    const __m512bh b = bcast_pair(pair(j));
    for (int h = 0; h < NH; ++h) {
      acc[j][h] = _mm512_dpbf16_ps(acc[j][h], av[h], b);
      if constexpr (LO) acc[j][h] = _mm512_dpbf16_ps(acc[j][h], alv[h], b);
    }
  }
}

// NH head blocks × NT keys. The key pointers stay fixed while one offset walks the pairs, so
// the loop needs NT + 2 address registers: NT = 8 keeps them all in registers (16 spilled six).
// DS (fp8_ds_mla): the pairs run tile by tile into fresh accumulators, each tile's sums folded
// into the score buffer (L1) with one FMA by the key's tile scale, so no second set of
// accumulators is live; the rope pairs after the last tile add with weight 1.
template <int NH, int NT, bool LO, bool DS>
void score_tile(const uint32_t* qp, const uint32_t* qlo, int head_blocks, int hb, int pairs, const uint16_t* const* keys,
                const float* tile_scales, float* sbuf, Prefetch& pf) {
  const uint16_t* k[NT];
  for (int t = 0; t < NT; ++t) k[t] = keys[t];
  const size_t qstride = size_t(head_blocks) * kLanes;
  const uint32_t* q = qp + size_t(hb) * kLanes;
  const uint32_t* ql = LO ? qlo + size_t(hb) * kLanes : nullptr;
  for (int seg = 0, p = 0; p < pairs; ++seg) {
    const bool scaled = DS && seg < ds_mla::kTiles;
    const int end = scaled ? std::min(pairs, (seg + 1) * kTilePairs) : pairs;
    __m512 acc[NT][NH];
    for (int t = 0; t < NT; ++t)
      for (int h = 0; h < NH; ++h) acc[t][h] = _mm512_setzero_ps();
    for (; p < end; ++p) {
      pf.tick();
      dot_pairs<NT, NH, LO>(acc, q, ql, [&](int t) { return k[t] + 2 * p; });
      q += qstride;
      if constexpr (LO) ql += qstride;
    }
    for (int t = 0; t < NT; ++t) {
      const __m512 scale = _mm512_set1_ps(scaled ? tile_scales[t * ds_mla::kTiles + seg] : 1.0f);
      for (int h = 0; h < NH; ++h) {
        float* dst = sbuf + (size_t(t) * head_blocks + hb + h) * kLanes;
        __m512 v = acc[t][h];
        if (seg > 0) v = scaled ? _mm512_fmadd_ps(v, scale, _mm512_loadu_ps(dst)) : _mm512_add_ps(v, _mm512_loadu_ps(dst));
        else if (scaled) v = _mm512_mul_ps(v, scale);
        _mm512_storeu_ps(dst, v);
      }
    }
  }
}

template <bool LO, bool DS>
void score_chunk_impl(const uint32_t* qp, const uint32_t* qlo, int head_blocks, int pairs, const uint16_t* const* keys,
                      const float* tile_scales, int num_keys, float* sbuf, Prefetch& pf) {
  // Pairs of head blocks × 8 keys when there are two (q loads 2, broadcasts 8 per 16 products);
  // a lone head block (16 heads, the DeepSeek TP-8 case) takes 8 keys against one q vector:
  // 8 chains still cover vdpbf16ps's latency.
  auto scales = [&](int t) { return DS ? tile_scales + size_t(t) * ds_mla::kTiles : nullptr; };
  int hb = 0;
  for (; hb + 2 <= head_blocks; hb += 2)
    for (int t = 0; t < num_keys; t += 8)
      score_tile<2, 8, LO, DS>(qp, qlo, head_blocks, hb, pairs, keys + t, scales(t), sbuf + size_t(t) * head_blocks * kLanes, pf);
  for (; hb < head_blocks; ++hb)
    for (int t = 0; t < num_keys; t += 8)
      score_tile<1, 8, LO, DS>(qp, qlo, head_blocks, hb, pairs, keys + t, scales(t), sbuf + size_t(t) * head_blocks * kLanes, pf);
}

// NC columns × NH head blocks of Oᵀ, scaled by the blocks' alpha on the way in.
template <int NC, int NH, bool LO>
void pv_tile(float* oacc, const float* alpha, int head_blocks, int hb, int c0, const uint32_t* pp, const uint32_t* plo,
             const uint32_t* vp, int cols, int num_pairs, Prefetch& pf) {
  __m512 acc[NC][NH];
  __m512 al[NH];
  for (int h = 0; h < NH; ++h) al[h] = _mm512_loadu_ps(alpha + size_t(hb + h) * kLanes);
  for (int c = 0; c < NC; ++c)
    for (int h = 0; h < NH; ++h)
      acc[c][h] = _mm512_mul_ps(_mm512_loadu_ps(oacc + (size_t(c0 + c) * head_blocks + hb + h) * kLanes), al[h]);
  const size_t pstride = size_t(head_blocks) * kLanes;
  const uint32_t* p = pp + size_t(hb) * kLanes;
  const uint32_t* pl = LO ? plo + size_t(hb) * kLanes : nullptr;
  const uint32_t* v = vp + c0;
  for (int i = 0; i < num_pairs; ++i) {
    pf.tick();
    dot_pairs<NC, NH, LO>(acc, p, pl, [&](int c) { return v + c; });
    p += pstride;
    if constexpr (LO) pl += pstride;
    v += cols;
  }
  for (int c = 0; c < NC; ++c)
    for (int h = 0; h < NH; ++h) _mm512_storeu_ps(oacc + (size_t(c0 + c) * head_blocks + hb + h) * kLanes, acc[c][h]);
}

template <bool LO>
void pv_chunk_impl(float* oacc, const float* alpha, int head_blocks, int hb0, int hb1, int cols, int col0, int col1,
                   const uint32_t* pp, const uint32_t* plo, const uint32_t* vp, int num_pairs, Prefetch& pf) {
  // Four head blocks × 4 columns (4 + 4 loads per 16 products) where there are four; fewer
  // blocks take more columns so 16 accumulators stay live.
  int hb = hb0;
  for (; hb + 4 <= hb1; hb += 4)
    for (int c = col0; c < col1; c += 4) pv_tile<4, 4, LO>(oacc, alpha, head_blocks, hb, c, pp, plo, vp, cols, num_pairs, pf);
  for (; hb + 2 <= hb1; hb += 2)
    for (int c = col0; c < col1; c += 8) pv_tile<8, 2, LO>(oacc, alpha, head_blocks, hb, c, pp, plo, vp, cols, num_pairs, pf);
  for (; hb < hb1; ++hb)
    for (int c = col0; c < col1; c += 16) pv_tile<16, 1, LO>(oacc, alpha, head_blocks, hb, c, pp, plo, vp, cols, num_pairs, pf);
}

}  // namespace

void score_chunk(const uint32_t* qp, const uint32_t* qlo, int head_blocks, int pairs, const uint16_t* const* keys,
                 const float* tile_scales, int num_keys, float* sbuf, Prefetch& pf) {
  if (qlo && tile_scales) score_chunk_impl<true, true>(qp, qlo, head_blocks, pairs, keys, tile_scales, num_keys, sbuf, pf);
  else if (qlo) score_chunk_impl<true, false>(qp, qlo, head_blocks, pairs, keys, tile_scales, num_keys, sbuf, pf);
  else if (tile_scales) score_chunk_impl<false, true>(qp, qlo, head_blocks, pairs, keys, tile_scales, num_keys, sbuf, pf);
  else score_chunk_impl<false, false>(qp, qlo, head_blocks, pairs, keys, tile_scales, num_keys, sbuf, pf);
}

int score_iterations(int head_blocks, int num_keys, int pairs) {
  return (head_blocks / 2 + head_blocks % 2) * (num_keys / 8) * pairs;
}

void pv_chunk(float* oacc, const float* alpha, int head_blocks, int hb0, int hb1, int cols, int col0, int col1,
              const uint32_t* pp, const uint32_t* plo, const uint32_t* vp, int num_pairs, Prefetch& pf) {
  if (plo) pv_chunk_impl<true>(oacc, alpha, head_blocks, hb0, hb1, cols, col0, col1, pp, plo, vp, num_pairs, pf);
  else pv_chunk_impl<false>(oacc, alpha, head_blocks, hb0, hb1, cols, col0, col1, pp, plo, vp, num_pairs, pf);
}

int pv_iterations(int head_blocks, int cols, int num_pairs) {
  const int fours = head_blocks / 4, twos = head_blocks % 4 / 2, ones = head_blocks % 2;
  return (fours * (cols / 4) + twos * (cols / 8) + ones * (cols / 16)) * num_pairs;
}

}  // namespace attn::mla::bf16dot
#endif
