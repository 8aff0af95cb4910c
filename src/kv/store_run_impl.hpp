// The body of one store build, compiled once per ISA (store_run.cpp, store_run.avx512.cpp) under
// the name ATTN_STORE_RUN_NAME. Included by exactly those files.
//
// Bytes, not FLOPs, bound a store: each value is read once from the caller's rows and written once
// into the cache. The layouts differ in how the written bytes group:
//   NHD / HND / MLA: one contiguous row per (token, head): a copy or a conversion loop.
//   HND_PAIRS K[d/2][t][2]: a 64-byte bf16 line holds 16 tokens x one dim pair, so 16 rows are
//     transposed (4-byte units) into n/2 whole lines; V[t/2][d][2]: a line holds 2 tokens x 16
//     dims, so two rows are interleaved element by element. Partial groups (a decode token, a
//     run that starts or ends inside a 16-token group) scatter their units one by one.
#include "kv/store_rows_impl.hpp"

namespace attn::kv {
namespace {

template <int kBytes>
inline void copy_unit(char* dst, const char* src) { std::memcpy(dst, src, kBytes); }

// K units (a dim pair, 2 * es bytes) of `g` rows into their lines: unit p of row j lands at
// dst + p * pair_step + j * unit. The scalar form every partial group takes.
void scatter_k_units(const char* const* rows, int32_t g, int32_t pairs, std::size_t unit, int64_t pair_step, char* dst) {
  for (int32_t p = 0; p < pairs; ++p) {
    char* line = dst + p * pair_step;
    for (int32_t j = 0; j < g; ++j) {
      const char* s = rows[j] + std::size_t(p) * unit;
      switch (unit) {
        case 2: copy_unit<2>(line + j * 2, s); break;
        case 4: copy_unit<4>(line + j * 4, s); break;
        default: copy_unit<8>(line + j * 8, s); break;
      }
    }
  }
}

#if ATTN_STORE_AVX512
// In-register transpose of 16 x 16 four-byte units: four stages each swap the off-diagonal
// b x b blocks (b = 8, 4, 2, 1); one two-source permute makes each new row.
struct Transpose16Indices {
  alignas(64) int32_t lo[4][16], hi[4][16];  // stage s swaps blocks of b = 8 >> s
  constexpr Transpose16Indices() : lo{}, hi{} {
    for (int s = 0; s < 4; ++s)
      for (int b = 8 >> s, c = 0; c < 16; ++c) {
        lo[s][c] = (c & b) ? 16 + (c ^ b) : c;
        hi[s][c] = (c & b) ? 16 + c : (c ^ b);
      }
  }
};
alignas(64) constexpr Transpose16Indices kTranspose16{};

template <int kStage>
inline void transpose16_stage(__m512i r[16]) {
  constexpr int b = 8 >> kStage;
  const __m512i ilo = _mm512_load_si512(kTranspose16.lo[kStage]), ihi = _mm512_load_si512(kTranspose16.hi[kStage]);
  for (int i = 0; i < 16; ++i) {
    if (i & b) continue;
    const __m512i a = r[i], p = r[i | b];
    r[i] = _mm512_permutex2var_epi32(a, ilo, p);
    r[i | b] = _mm512_permutex2var_epi32(a, ihi, p);
  }
}

inline void transpose16_epi32(__m512i r[16]) {
  transpose16_stage<0>(r);
  transpose16_stage<1>(r);
  transpose16_stage<2>(r);
  transpose16_stage<3>(r);
}

// 16 rows of 2-byte values (bf16 / f16): 16 dim pairs at a time become 16 whole K lines.
void transpose_k_lines16(const char* const* rows, int32_t pairs, int64_t pair_step, char* dst, bool stream) {
  for (int32_t p0 = 0; p0 < pairs; p0 += 16) {
    const int32_t m = std::min(16, pairs - p0);
    const __mmask16 mask = __mmask16((1u << m) - 1u);
    __m512i r[16];
    for (int j = 0; j < 16; ++j) r[j] = _mm512_maskz_loadu_epi32(mask, rows[j] + 4 * std::size_t(p0));
    transpose16_epi32(r);
    for (int32_t i = 0; i < m; ++i) store_line(dst + (p0 + i) * pair_step, r[i], stream);
  }
}

// Two rows of n 2-byte values interleaved (a0 b0 a1 b1 ...) into 2n contiguous values: a V pair line.
void interleave_v_pair16(const char* a, const char* b, int32_t n, char* dst, bool stream) {
  alignas(64) static constexpr int16_t kLo[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
                                                  8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static constexpr int16_t kHi[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                                  24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i ilo = _mm512_load_si512(kLo), ihi = _mm512_load_si512(kHi);
  for (int32_t d = 0; d < n; d += 32) {
    const int32_t m = std::min(32, n - d);
    const __mmask32 in = m == 32 ? ~__mmask32(0) : __mmask32((1u << m) - 1u);
    const __m512i x = _mm512_maskz_loadu_epi16(in, a + 2 * std::size_t(d));
    const __m512i y = _mm512_maskz_loadu_epi16(in, b + 2 * std::size_t(d));
    const int32_t out = 2 * m;  // values this chunk writes: lo takes the first 32, hi the rest
    const __mmask32 olo = out >= 32 ? ~__mmask32(0) : __mmask32((1u << out) - 1u);
    const __mmask32 ohi = out >= 64 ? ~__mmask32(0) : out <= 32 ? 0 : __mmask32((1u << (out - 32)) - 1u);
    char* line = dst + 4 * std::size_t(d);
    const __m512i lo = _mm512_permutex2var_epi16(x, ilo, y);
    if (olo == ~__mmask32(0)) {
      store_line(line, lo, stream);
    } else {
      _mm512_mask_storeu_epi16(line, olo, lo);
    }
    const __m512i hi = _mm512_permutex2var_epi16(x, ihi, y);
    if (ohi == ~__mmask32(0)) {
      store_line(line + 64, hi, stream);
    } else if (ohi) {
      _mm512_mask_storeu_epi16(line + 64, ohi, hi);
    }
  }
}
#endif

// Two rows interleaved element by element (V[t/2][d][2]), any element size.
void interleave_v_pair(const char* a, const char* b, int32_t n, std::size_t es, char* dst, bool stream) {
#if ATTN_STORE_AVX512
  if (es == 2) return interleave_v_pair16(a, b, n, dst, stream);
#endif
  (void)stream;
  for (int32_t d = 0; d < n; ++d) {
    std::memcpy(dst + (2 * std::size_t(d)) * es, a + std::size_t(d) * es, es);
    std::memcpy(dst + (2 * std::size_t(d) + 1) * es, b + std::size_t(d) * es, es);
  }
}

// One row into its V pair line at token parity `odd` (the other token's values stay).
void place_v_row(const char* row, int32_t n, std::size_t es, bool odd, char* pair_line) {
  for (int32_t d = 0; d < n; ++d) std::memcpy(pair_line + (2 * std::size_t(d) + odd) * es, row + std::size_t(d) * es, es);
}

constexpr int32_t kGroup = 16;      // tokens per K line
constexpr int32_t kTileWidth = 512;  // widest row converted into the on-stack tile (wider rows: per token)

// Where one group's rows (storage dtype, g <= 16 tokens from t, within one 16-token group) land.
struct PairRun {
  char* base;            // the (block, head) run: K or V element (t = 0, d = 0)
  std::size_t es;        // storage element bytes
  int64_t pair_step;     // K: bytes between consecutive dim pairs' lines
  int64_t v_pair_bytes;  // V: bytes of one token pair's interleaved rows
  bool stream;           // whole lines past the caches (a bulk write)
};

void place_group(const PairRun& r, const char* const* rows, int32_t g, int32_t t, bool is_v, int32_t n) {
  if (!is_v) {
    char* dst = r.base + 2 * int64_t(t) * int64_t(r.es);
#if ATTN_STORE_AVX512
    if (g == kGroup && r.es == 2) return transpose_k_lines16(rows, n / 2, r.pair_step, dst, r.stream);
#endif
    return scatter_k_units(rows, g, n / 2, 2 * r.es, r.pair_step, dst);
  }
  int32_t j = 0;
  if (t % 2) place_v_row(rows[j++], n, r.es, true, r.base + (t / 2) * r.v_pair_bytes);
  for (; j + 1 < g; j += 2) interleave_v_pair(rows[j], rows[j + 1], n, r.es, r.base + ((t + j) / 2) * r.v_pair_bytes, r.stream);
  if (j < g) place_v_row(rows[j], n, r.es, false, r.base + ((t + j) / 2) * r.v_pair_bytes);
}

// HND_PAIRS: rows of tokens [offset, offset + count) of one (block, head) run, group by group;
// rows already in the storage dtype are read in place, others converted into an on-stack tile.
int64_t store_pairs(const PagedKV& pv, const RowSource& src, int64_t block, int32_t offset, int32_t count, int32_t head,
                    bool is_v, int32_t n, float inv_scale, bool stream) {
  const std::size_t es = dtype_size(pv.dtype);
  const PairRun r{static_cast<char*>(pv.base) + kv_element_offset(pv, block, 0, head, 0, is_v) * int64_t(es), es,
                  2 * int64_t(pv.block_size) * int64_t(es), 2 * pv.token_stride * int64_t(es), stream};
  const bool same = src.dtype == pv.dtype && !fp8(pv.dtype);
  int64_t bad = 0;
  if (!same && n > kTileWidth) {  // rare wide rows: converted and placed one token at a time
    alignas(64) char row[limits::kMaxHeadSize * sizeof(float)];
    const char* rows[1] = {row};
    for (int32_t i = 0; i < count; ++i) {
      bad += write_row(src.data + i * src.stride, src.dtype, row, pv.dtype, n, inv_scale, token_scale_slot(pv, is_v, block, offset + i, head));
      place_group(r, rows, 1, offset + i, is_v, n);
    }
    return bad;
  }
  alignas(64) char tile[kGroup * kTileWidth * sizeof(float)];
  for (int32_t done = 0; done < count;) {
    const int32_t t = offset + done;
    const int32_t g = std::min(count - done, kGroup - t % kGroup);  // up to the next 16-token boundary
    const char* rows[kGroup];
    for (int32_t j = 0; j < g; ++j) {
      const char* s = src.data + int64_t(done + j) * src.stride;
      if (same) {
        rows[j] = s;
        continue;
      }
      char* converted = tile + std::size_t(j) * std::size_t(n) * es;
      bad += write_row(s, src.dtype, converted, pv.dtype, n, inv_scale, token_scale_slot(pv, is_v, block, t + j, head));
      rows[j] = converted;
    }
    place_group(r, rows, g, t, is_v, n);
    done += g;
  }
  return bad;
}

}  // namespace

int64_t ATTN_STORE_RUN_NAME(const PagedKV& pv, const RowSource& src, int64_t block, int32_t offset, int32_t count,
                            int32_t head, bool is_v, int32_t n, float inv_scale, bool stream) {
  int64_t bad = 0;
  if (pv.int4) {  // quantized a vector at a time, then placed in the cache's layout
    uint8_t codes[limits::kMaxHeadSize / 2];
    for (int32_t i = 0; i < count; ++i) {
      bad += quantize_int4_row(src.data + i * src.stride, src.dtype, codes, n, token_scale_slot(pv, is_v, block, offset + i, head));
      int4_head::store_vector(pv, block, offset + i, head, is_v, n, codes);
    }
    return bad;
  }
  if (pv.turboquant || pv.nvfp4) {  // a vector at a time, widened to fp32, into its row / slot part
    alignas(64) float row[limits::kMaxHeadSize];
    for (int32_t i = 0; i < count; ++i) {
      const char* s = src.data + i * src.stride;
      for (int32_t x = 0; x < n; ++x) row[x] = load_as_float(s, src.dtype, x);
      uint8_t* dst = static_cast<uint8_t*>(pv.base) + kv_element_offset(pv, block, offset + i, head, 0, is_v);
      if (pv.turboquant) {  // K or V part of the token's slot
        (is_v ? turboquant::quantize_value : turboquant::quantize_key)(row, n, pv.tq, dst, &bad);
      } else {  // codes and block scales (inv_scale: 1 / the global scale)
        const int64_t saturated = nvfp4::quantize(row, n, inv_scale, pv.nvfp4_four_over_six, dst, &bad);
        bad += saturated;
      }
    }
    return bad;
  }
  if (pv.layout == KVLayout::HND_PAIRS) {
    bad = store_pairs(pv, src, block, offset, count, head, is_v, n, inv_scale, stream);
  } else {
    const std::size_t es = dtype_size(pv.dtype);
    char* base = static_cast<char*>(pv.base);
    for (int32_t i = 0; i < count; ++i)
      bad += write_row(src.data + i * src.stride, src.dtype, base + kv_element_offset(pv, block, offset + i, head, 0, is_v) * int64_t(es),
                       pv.dtype, n, inv_scale, token_scale_slot(pv, is_v, block, offset + i, head), stream);
  }
#if ATTN_STORE_AVX512
  if (stream) _mm_sfence();  // streamed lines are weakly ordered: visible before the caller's next step
#endif
  return bad;
}

}  // namespace attn::kv
