#pragma once
// Register-blocked fp32 tile products for the chunked mixer prefills (mamba2 SSD, linear
// attention, gated delta net). Every product there has the shape C[M, N] = beta·C + A[M, K]·B[K, N]
// with M, N, K <= a few hundred, so one micro-kernel serves them all: a tile of kRows rows × kVecs
// vectors of C lives in registers while k runs; per k it loads kVecs contiguous vectors of B's row
// k and broadcasts kRows scalars of A (A is read by scalar, so it can be strided and unpadded).
//
// Layout convention of the callers: B and C rows are padded to kPad floats (zeros in the pad), so
// the kernel never needs a masked load or store. kPad is 16 for every ISA, so a scratch layout does
// not depend on which build runs.
//
// Internal linkage on purpose: each per-ISA kernel file includes this and gets its own copy,
// compiled with its own flags (the same reason the scalar helpers in mixer_support.hpp are
// static inline). Written with GCC/Clang vector extensions: 16 lanes become zmm registers in the
// AVX-512 build (and `acc += a * b` contracts to vfmadd231ps), 4 lanes become SSE / NEON
// registers in the portable build.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cpu/prefetch.hpp"

namespace attn::mixer {
namespace {

constexpr int64_t kPad = 16;
inline int64_t padded(int64_t n) { return (n + kPad - 1) / kPad * kPad; }

#if defined(__AVX512F__)
constexpr int kLanes = 16;
// 6 × 4 = 24 accumulators + 4 B vectors + 1 broadcast = 29 of the 32 zmm registers: 24 FMAs per
// 10 loads in the k loop, enough to keep the FMA pipes busy rather than the load ports.
constexpr int kRows = 6, kVecs = 4;
#else
constexpr int kLanes = 4;
// 16 xmm registers (SSE2 baseline): 4 × 2 = 8 accumulators + 2 B vectors + 1 broadcast.
constexpr int kRows = 4, kVecs = 2;
#endif
static_assert(kPad % kLanes == 0, "padding must be whole vectors on every ISA");

typedef float VecF __attribute__((vector_size(kLanes * sizeof(float))));

inline VecF vload(const float* p) {
  VecF v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void vstore(float* p, VecF v) { std::memcpy(p, &v, sizeof v); }
// s - 0 == s exactly (unlike s + 0 for s = -0), so the subtraction folds away: one vbroadcastss.
inline VecF vbroadcast(float s) { return s - VecF{}; }

/// C[MR, NV·kLanes] = beta·C + A[MR, K]·B[K, NV·kLanes]; beta == 0 never reads C (it may hold NaN).
template <int MR, int NV>
inline void tile(int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, float beta) {
  VecF acc[MR][NV];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      acc[m][v] = beta == 0.0f ? VecF{} : vload(C + m * ldc + v * kLanes) * vbroadcast(beta);
    }
  }
  for (int64_t k = 0; k < K; ++k) {
    VecF b[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) b[v] = vload(B + k * ldb + v * kLanes);
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const VecF a = vbroadcast(A[m * lda + k]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[m][v] += a * b[v];
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) vstore(C + m * ldc + v * kLanes, acc[m][v]);
  }
}

template <int NV>
inline void tile_rows(int rows, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc,
                      float beta) {
  static_assert(kRows <= 6, "extend the switch with kRows");
  switch (rows) {
    case 1: tile<1, NV>(K, A, lda, B, ldb, C, ldc, beta); break;
    case 2: tile<2, NV>(K, A, lda, B, ldb, C, ldc, beta); break;
    case 3: tile<3, NV>(K, A, lda, B, ldb, C, ldc, beta); break;
    case 4: tile<4, NV>(K, A, lda, B, ldb, C, ldc, beta); break;
    case 5: if constexpr (kRows >= 5) tile<5, NV>(K, A, lda, B, ldb, C, ldc, beta); break;
    case 6: if constexpr (kRows >= 6) tile<6, NV>(K, A, lda, B, ldb, C, ldc, beta); break;
    default: break;
  }
}

inline void tile_any(int rows, int vecs, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                     int64_t ldc, float beta) {
  static_assert(kVecs <= 4, "extend the switch with kVecs");
  switch (vecs) {
    case 1: tile_rows<1>(rows, K, A, lda, B, ldb, C, ldc, beta); break;
    case 2: tile_rows<2>(rows, K, A, lda, B, ldb, C, ldc, beta); break;
    case 3: if constexpr (kVecs >= 3) tile_rows<3>(rows, K, A, lda, B, ldb, C, ldc, beta); break;
    case 4: if constexpr (kVecs >= 4) tile_rows<4>(rows, K, A, lda, B, ldb, C, ldc, beta); break;
    default: break;
  }
}

/// dst[c, r] = src[r, c]·(scale ? scale[r] : 1) for r < rows, c < cols, and dst[c, r] = 0 for
/// r in [rows, dst_ld): the transposed, zero-padded panels the products read by rows. `src` should
/// be a packed copy, not the caller's token rows: rows a multiple of 4 KiB apart (a head's slice
/// of [T, H, d]) all fall in one L1 set, and reading a column of them misses on every load.
inline void pack_transposed(const float* src, int64_t rows, int64_t cols, int64_t src_ld, float* dst, int64_t dst_ld,
                            const float* scale = nullptr) {
  // 16 columns at a time: each source row contributes one cache line, each of the 16 destination
  // rows fills one line over 16 consecutive source rows.
  for (int64_t c0 = 0; c0 < cols; c0 += 16) {
    const int64_t cn = std::min<int64_t>(16, cols - c0);
    for (int64_t r = 0; r < rows; ++r) {
      const float* s = src + r * src_ld + c0;
      const float f = scale ? scale[r] : 1.0f;
      for (int64_t c = 0; c < cn; ++c) dst[(c0 + c) * dst_ld + r] = s[c] * f;
    }
  }
  for (int64_t c = 0; c < cols; ++c) std::fill(dst + c * dst_ld + rows, dst + (c + 1) * dst_ld, 0.0f);
}

/// Asks for rows [0, rows) × [0, n) floats of a row-major block with leading dimension `ld` to
/// be brought into L2. The chunked forms call it for the next chunk's token rows before working
/// on the current one: a head's slice of a token row lies kilobytes from the next token's, one
/// page each, and hardware prefetchers stop at page boundaries, so without it every row's first
/// line is a full miss the products then wait for.
inline void prefetch_rows(const float* p, int64_t rows, int64_t ld, int64_t n) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; c += 16) cpu::prefetch<cpu::PrefetchTo::l2>(p + r * ld + c);
}

/// How a product restricts itself to a causal (lower-triangular) chunk.
enum class Causal {
  none,
  k,  // A[i, k] == 0 for k > i: row block [i0, i1) stops k at i1
  n,  // only C[i, j] for j <= i is wanted: row block [i0, i1) stops at the vector holding column i1 - 1
};

/// C[M, N] = beta·C + A[M, K]·B[K, N], N a multiple of kPad (B and C padded rows, see above).
/// Column panels outside, row tiles inside: a panel of B (K × kVecs·kLanes floats, <= 32 KiB for
/// K <= 128) stays in L1 while every row tile streams past it.
inline void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                 int64_t ldc, float beta, Causal causal = Causal::none) {
  const int64_t vecs = N / kLanes;
  for (int64_t v0 = 0; v0 < vecs; v0 += kVecs) {
    const int nv = int(std::min<int64_t>(kVecs, vecs - v0));
    for (int64_t i0 = 0; i0 < M; i0 += kRows) {
      const int rows = int(std::min<int64_t>(kRows, M - i0));
      int64_t kk = K;
      int cv = nv;
      if (causal == Causal::k) kk = std::min(K, i0 + rows);
      if (causal == Causal::n) {
        const int64_t need = (i0 + rows + kLanes - 1) / kLanes;  // vectors holding columns < i1
        if (need <= v0) continue;
        cv = int(std::min<int64_t>(nv, need - v0));
      }
      tile_any(rows, cv, kk, A + i0 * lda, lda, B + v0 * kLanes, ldb, C + i0 * ldc + v0 * kLanes, ldc, beta);
    }
  }
}

}  // namespace
}  // namespace attn::mixer
