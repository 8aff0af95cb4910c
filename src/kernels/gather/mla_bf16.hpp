#pragma once
// The AVX512-BF16 attend kernel (vdpbf16ps, the fastest matmul instruction of a CPU without AMX),
// split by phase: pack (q, cache entries → bf16 pair layouts), tiles (the two register-blocked
// products), and the driver (chunk loop, online softmax, state in/out) in mla_bf16.avx512.cpp.
//
// Heads are the SIMD lanes of both products: 16 query rows per vector, so the online softmax is
// lane-wise (no horizontal max/sum per row) and a masked key is a lane mask, never 0 · NaN.
//   Sᵀ[key][row]  = Σ_p  q[row](2p, 2p+1) · k[key](2p, 2p+1)   B = one 32-bit bf16 pair of the
//                                                                key entry, broadcast from the
//                                                                cache itself (no repack of K)
//   Oᵀ[col][row] += Σ_i  P[row](2i, 2i+1) · V(2i, 2i+1)[col]  B = the chunk's V rows interleaved
//                                                                by key pairs (packed once, read
//                                                                by every head block)
//
// fp8_ds_mla entries (per-tile scales) keep their e4m3 values exact in bf16; each 128-value tile
// is weighted by its key's own scale outside the products: the scores sum the tiles' partial dot
// products times their scales, and P·V runs tile by tile with P times the key's tile scale.
#include <cstdint>

#include "attn/kv_cache.hpp"

namespace attn::mla::bf16dot {

constexpr int kLanes = 16;  // query rows per vector
// Keys per chunk: 128 × 1152 B of bf16 latent, its V pairs (128 KiB) and the next chunk's
// prefetched lines stay in L2, and each P·V tile's Oᵀ round trip (load, rescale, store) serves
// 64 key pairs. 64-key chunks (32 pairs per round trip) measured ~4 % slower at 16 heads.
constexpr int kKeys = 128;

/// The next chunk's cache lines, prefetched one at a time every `every` inner iterations of
/// both products of this chunk: its DRAM reads then overlap the products at a rate memory can
/// serve, instead of stalling the next chunk's first touch (or, issued in bursts, stalling on
/// full miss buffers). Into L2 only (prefetcht1): a chunk is larger than L1, so lines brought
/// to L1 a chunk early only evict the q pairs and K rows the products are reading (~4 % at 16
/// heads).
struct Prefetch {
  const char* const* rows = nullptr;  // entry addresses, in key order
  int num_rows = 0, row_lines = 0;    // lines of 64 bytes per entry
  int every = 1 << 30;                // inner iterations between two prefetches
  int row = 0, line = 0, countdown = 1 << 30;
  void tick() {
    if (--countdown > 0) return;
    countdown = every;
    if (row >= num_rows) return;
    __builtin_prefetch(rows[row] + 64 * line, 0, 2);
    if (++line == row_lines) line = 0, ++row;
  }
};

constexpr int kTilePairs = ds_mla::kTile / 2;  // pairs per fp8_ds_mla tile

/// Scores of one chunk: sbuf[key][hb][16] = Σ over `pairs` of qp[p][hb][lane] · k[key] pair p,
/// for every head block and `keys` keys (a multiple of 16; missing keys point at a zero row).
/// qlo (nullable): the residue of q below bf16, added as a second product.
/// tile_scales (nullable, fp8_ds_mla): [key][ds_mla::kTiles]; pairs [kTilePairs·t, kTilePairs·(t+1))
/// are weighted by tile t's scale, the pairs after the last tile (rope) by 1.
void score_chunk(const uint32_t* qp, const uint32_t* qlo, int head_blocks, int pairs, const uint16_t* const* keys,
                 const float* tile_scales, int num_keys, float* sbuf, Prefetch& pf);
/// Inner iterations score_chunk runs (for spreading the prefetches).
int score_iterations(int head_blocks, int num_keys, int pairs);

/// Oᵀ[col][hb] = Oᵀ · alpha[hb] + Σ_i pp[i][hb] · vp[i][col] over `num_pairs` key pairs, for
/// head blocks [hb0, hb1) and columns [col0, col1) of the `cols` columns of vp (all multiples of
/// 16). plo (nullable): the residue of P below bf16.
void pv_chunk(float* oacc, const float* alpha, int head_blocks, int hb0, int hb1, int cols, int col0, int col1,
              const uint32_t* pp, const uint32_t* plo, const uint32_t* vp, int num_pairs, Prefetch& pf);
/// Inner iterations pv_chunk runs over head blocks [0, head_blocks).
int pv_iterations(int head_blocks, int cols, int num_pairs);

/// Rows of `n` entries (bf16, `cols` values each; null = zero) interleaved by pairs of keys:
/// vp[i][c] = (v[2i][c], v[2i+1][c]) for i < ceil(n / 2).
void pack_v_pairs(const uint16_t* const* rows, int n, int cols, uint32_t* vp);

/// fp8 (e4m3 or e5m2) → bf16, exactly (3 or 2 mantissa bits fit in bf16's 7; NaN stays NaN).
void fp8_to_bf16(const uint8_t* src, bool e5m2, int n, uint16_t* dst);

}  // namespace attn::mla::bf16dot
