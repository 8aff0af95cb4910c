// cpu_flash decode kernel: its chunk sizes, and how cache rows and pair lines widen to fp32 /
// bf16 (bf16 unpacks, fp16-bit e4m3, the VBMI byte tables for e4m3 / e5m2); q rows in,
// output rows out.
// Part of the decode kernel (decode_impl.hpp), compiled once per decode build inside the
// namespace its .cpp names (ATTN_CF_NS, with ATTN_CF_VBMI 0 or 1).
#pragma once
#include "kernels/simd/simd_avx512.hpp"
#include "backends/cpu_flash/decode.hpp"
#include "backends/cpu_flash/nvfp4_unpack.hpp"
#include "backends/cpu_flash/turboquant_unpack.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "attn/numeric.hpp"

namespace attn::cpu_flash::ATTN_CF_NS {

constexpr int kChunk = 32;  // keys per online-softmax step on row caches: two score vectors per row
constexpr int kPairChunk = 64;  // on pair caches: a whole 64-key block, 16 KiB of bf16 K per KV head
constexpr int kMaxChunk = std::max(kChunk, kPairChunk);  // the scratch rows of scores and P
constexpr int kSlice = 32;  // head-size elements per load step (one 64-byte line of bf16)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// Where lane i of a slice's lo (hi = false) or hi vector comes from in the 32-element slice.
/// bf16 rows widen by unpacking 16-bit elements within 128-bit lanes: lo holds elements
/// 8L..8L+3 of each lane L, hi 8L+4..8L+7. Every other type is in natural order.
template <KvType T>
constexpr int slice_elem(bool hi, int i) {
  if constexpr (T == KvType::bf16) return (i / 4) * 8 + (hi ? 4 : 0) + i % 4;
  return (hi ? 16 : 0) + i;
}

/// 32 fp16 bit patterns as two fp32 vectors, natural order.
inline void f16x32(__m512i h, __m512& lo, __m512& hi) {
  lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
  hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
}

/// One 32-element slice of a K or V row as two fp32 vectors (e4m3 without its 2^8: see
/// kE4m3Rebias, folded into the scales).
template <KvType T>
inline void load_slice(const char* p, __m512& lo, __m512& hi) {
  if constexpr (T == KvType::bf16) {
    const __m512i v = _mm512_loadu_si512(p), z = _mm512_setzero_si512();
    lo = _mm512_castsi512_ps(_mm512_unpacklo_epi16(z, v));
    hi = _mm512_castsi512_ps(_mm512_unpackhi_epi16(z, v));
  } else if constexpr (T == KvType::f16) {
    f16x32(_mm512_loadu_si512(p), lo, hi);
  } else if constexpr (T == KvType::f32) {
    lo = _mm512_loadu_ps(p), hi = _mm512_loadu_ps(p + 64);
  } else if constexpr (T == KvType::e4m3) {
    // Byte b → fp16 bits: (b & 0x7f) << 7 with the sign moved from bit 14 to 15 by adding it
    // to itself (exact, subnormals included; the value is 2^-8 too small).
    const __m512i x = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    const __m512i a = _mm512_slli_epi16(x, 7);
    const __m512i b = _mm512_add_epi16(a, _mm512_and_si512(a, _mm512_set1_epi16(0x4000)));
    // The NaN codes (S.1111.111) become fp16 NaN.
    const __mmask32 nan = _mm512_cmpeq_epi16_mask(_mm512_and_si512(x, _mm512_set1_epi16(0x7f)), _mm512_set1_epi16(0x7f));
    f16x32(_mm512_mask_mov_epi16(b, nan, _mm512_or_si512(b, _mm512_set1_epi16(0x7e00))), lo, hi);
  } else {  // e5m2 is the top byte of an fp16
    f16x32(_mm512_slli_epi16(_mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 8), lo, hi);
  }
}

/// Which of 64 source elements lands at bf16 position p of e4m3x64_bf16_lanes' a0 (p < 32) or
/// a1 (p - 32): the byte unpacks interleave within 128-bit lanes.
constexpr int e4m3_lane_elem(int p) { return p < 32 ? 16 * (p / 8) + p % 8 : 16 * ((p - 32) / 8) + 8 + p % 8; }

#if ATTN_CF_VBMI
/// bf16 encodings of every e4m3 magnitude × 2^-8 (the same 2^-8 as the fp16-bit path, see
/// kE4m3Rebias), split into low and high bytes: 128-entry tables for vpermi2b. All values
/// are exact in bf16; the NaN code decodes like the fp16-bit path (finite).
/// bf16 bits of e4m3 magnitude em × 2^-8 (NaN for the NaN code), from the fields: normal E ≥ 1 is
/// (1 + M/8)·2^(E-15), subnormal M·2^-17 normalized by its top bit b.
constexpr uint16_t e4m3_bf16_bits(int em) {
  const int e = em >> 3, m = em & 7;
  if (em == 127) return 0x7fc0;  // the NaN code stays NaN
  if (e > 0) return uint16_t(((e + 112) << 7) | (m << 4));
  if (m == 0) return 0;
  const int b = m >= 4 ? 2 : m >= 2 ? 1 : 0;
  return uint16_t(((110 + b) << 7) | ((m - (1 << b)) << (7 - b)));
}
struct E4m3Table {
  alignas(64) uint8_t lo[128], hi[128];
};
/// The low- and high-byte tables of the bf16 encodings bits(em) of the 128 magnitudes em.
constexpr E4m3Table make_byte_tables(uint16_t (*bits)(int)) {
  E4m3Table t{};
  for (int em = 0; em < 128; ++em) t.lo[em] = uint8_t(bits(em) & 0xff), t.hi[em] = uint8_t(bits(em) >> 8);
  return t;
}
alignas(64) inline constexpr E4m3Table kE4m3Table = make_byte_tables(e4m3_bf16_bits);
/// bf16 bits of e5m2 magnitude em (exact, no rebias: e5m2 has bf16's range and fewer mantissa
/// bits): normal (1 + M/4)·2^(E-15), subnormal M·2^-16, E = 31 infinity or NaN.
constexpr uint16_t e5m2_bf16_bits(int em) {
  const int e = em >> 2, m = em & 3;
  if (e == 31) return m == 0 ? 0x7f80 : 0x7fc0;
  if (e > 0) return uint16_t(((e + 112) << 7) | (m << 5));
  return m == 0 ? 0 : m == 1 ? uint16_t(111 << 7) : m == 2 ? uint16_t(112 << 7) : uint16_t((112 << 7) | (1 << 6));
}
alignas(64) inline constexpr E4m3Table kE5m2Table = make_byte_tables(e5m2_bf16_bits);

/// The four 64-byte table vectors vpermi2b reads (e4m3's, or another fp8 format's), loaded once
/// per chunk.
struct E4m3Lut {
  __m512i lo0, lo1, hi0, hi1;
  explicit E4m3Lut(const E4m3Table& t = kE4m3Table)
      : lo0(_mm512_load_si512(t.lo)), lo1(_mm512_load_si512(t.lo + 64)), hi0(_mm512_load_si512(t.hi)),
        hi1(_mm512_load_si512(t.hi + 64)) {}
};

/// 64 e4m3 bytes (x) as 64 bf16 in lane order (see e4m3_lane_elem): two lookups, the sign, two
/// byte unpacks.
inline void e4m3x64_bf16_lanes(const E4m3Lut& t, __m512i x, __m512i& a0, __m512i& a1) {
  const __m512i lo = _mm512_permutex2var_epi8(t.lo0, x, t.lo1);
  __m512i hi = _mm512_permutex2var_epi8(t.hi0, x, t.hi1);
  hi = _mm512_ternarylogic_epi32(hi, x, _mm512_set1_epi8(char(0x80)), 0xF8);  // hi | (x & sign)
  a0 = _mm512_unpacklo_epi8(lo, hi), a1 = _mm512_unpackhi_epi8(lo, hi);
}

/// 64 e4m3 bytes as 64 bf16 in natural order (a0: elements 0..31, a1: 32..63). The qword
/// permute first puts source bytes 8L..8L+7 and 32+8L..32+8L+7 in 128-bit lane L, which is
/// what the byte unpacks after the lookups interleave.
inline void e4m3x64_bf16(const E4m3Lut& t, const char* p, __m512i& a0, __m512i& a1) {
  e4m3x64_bf16_lanes(t, _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 4, 1, 5, 2, 6, 3, 7), _mm512_loadu_si512(p)), a0, a1);
}

/// Rows [0, n) of d e4m3 values, `stride` bytes apart, into bf16 rows of the scratch buffer.
/// Lanes: in e4m3_lane_elem order within each 64 elements rather than natural order.
inline void e4m3_rows_bf16(const char* src, int64_t stride, int n, int d, uint16_t (*dst)[kMaxHeadSizeDecode], bool lanes = false) {
  const E4m3Lut t;
  for (int r = 0; r < n; ++r, src += stride)
    for (int x = 0; x < d; x += 64) {
      __m512i a0, a1;
      if (lanes)
        e4m3x64_bf16_lanes(t, _mm512_loadu_si512(src + x), a0, a1);
      else
        e4m3x64_bf16(t, src + x, a0, a1);
      _mm512_store_si512(&dst[r][x], a0), _mm512_store_si512(&dst[r][x + 32], a1);
    }
}
#endif

/// d elements (a multiple of 32) of a q row as fp32.
inline void load_row(const void* src, DType dt, int64_t off, int d, float* dst) {
  switch (dt) {
    case DType::float32:
      for (int x = 0; x < d; x += 16) _mm512_store_ps(dst + x, _mm512_loadu_ps(static_cast<const float*>(src) + off + x));
      break;
    case DType::bfloat16:
      for (int x = 0; x < d; x += 16)
        _mm512_store_ps(dst + x, _mm512_castsi512_ps(_mm512_slli_epi32(
                                     _mm512_cvtepu16_epi32(_mm256_loadu_si256(
                                         reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(src) + off + x))), 16)));
      break;
    default:  // float16
      for (int x = 0; x < d; x += 16)
        _mm512_store_ps(dst + x, _mm512_cvtph_ps(_mm256_loadu_si256(
                                     reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(src) + off + x))));
      break;
  }
}

/// fp32 → bf16 bits, round to nearest even, NaN kept quiet (as f32_to_bf16, 16 lanes).
inline __m256i bf16_rne(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  const __m512i b = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(u, _mm512_set1_epi32(0x400000)));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(b, 16));
}

/// store_row with the conversion in 16-lane vectors (d a multiple of 32).
inline void store_out_row(const KernelArgs& a, int64_t token, int head, const float* o, float m, float l) {
  const __m512 f = _mm512_set1_ps(row_factor(a, head, m, l));
  const int64_t base = token * a.o_tok_stride + int64_t(head) * a.o_head_stride;
  const int d = a.head_size_v;
  for (int x = 0; x < d; x += 16) {
    const __m512 v = _mm512_mul_ps(_mm512_load_ps(o + x), f);
    if (a.out_dtype == DType::float32)
      _mm512_storeu_ps(static_cast<float*>(a.out) + base + x, v);
    else if (a.out_dtype == DType::bfloat16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(a.out) + base + x), bf16_rne(v));
    else
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(a.out) + base + x),
                          _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
}

}  // namespace attn::cpu_flash::ATTN_CF_NS
