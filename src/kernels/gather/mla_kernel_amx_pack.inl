// AMX attend kernel, packing and non-finite handling (see mla_kernel_amx.cpp): cache entries
// into bf16 key rows and V pair tiles (pack_pair), q into B tiles of bf16 pairs (pack_q), and the
// inf / NaN V values a tile product must not see (hold_nonfinite, add_nonfinite). Included by
// mla_kernel_amx.cpp inside its anonymous namespace, after ATTN_AMX_TARGET and the tile
// constants (kKeys, kRows, kTile) that these use.

/// 64-byte aligned view into a growing vector (tile loads want aligned rows).
template <class T>
T* aligned(std::vector<T>& v, size_t n) {
  if (v.size() < n + 64 / sizeof(T)) v.resize(n + 64 / sizeof(T));
  const auto p = reinterpret_cast<uintptr_t>(v.data());
  return reinterpret_cast<T*>((p + 63) & ~uintptr_t(63));
}

struct Fp8Tables {
  std::array<uint16_t, 256> e4m3{}, e5m2{};
  Fp8Tables() {
    for (int i = 0; i < 256; ++i) {
      e4m3[i] = f32_to_bf16(fp8_e4m3_to_f32(uint8_t(i)));  // exact: 3/2 mantissa bits fit in bf16's 7
      e5m2[i] = f32_to_bf16(fp8_e5m2_to_f32(uint8_t(i)));
    }
  }
};

inline const uint8_t* entry_ptr(const PagedKV& kv, int64_t slot) {
  const int64_t block = slot / kv.block_size, off = slot % kv.block_size;
  return static_cast<const uint8_t*>(kv.base) + (block * kv.block_stride + off * kv.token_stride) * int64_t(dtype_size(kv.dtype));
}

/// Two cache entries (keys 2i, 2i+1; null = a zero row past the chunk's end) → their bf16 rows
/// of `wp` values in the key buffer (zero padded) and row i of the V pair tiles, which holds
/// (V[2i][c], V[2i+1][c]) for every latent column c. One pass: the cache bytes are read once.
/// Returns bit e set where entry e's latent part (V) holds a non-finite value.
ATTN_AMX_TARGET unsigned pack_pair(DType dtype, const uint8_t* src0, const uint8_t* src1, int width, int wp, int rank,
                               uint16_t* k0, uint16_t* vp_row, bool store_k) {
  alignas(64) static const uint16_t lo_idx[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
                                                  8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static const uint16_t hi_idx[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                                  24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i lo = _mm512_load_si512(lo_idx), hi = _mm512_load_si512(hi_idx);
  const __m512i exp_bits = _mm512_set1_epi16(0x7f80);
  unsigned nonfinite = 0;
  uint16_t* k1 = k0 + wp;
  const bool bf16 = dtype == DType::bfloat16;
  if (!bf16) {
    // fp8: widen through the exact bf16 tables into the key rows, then pair them from there.
    static const Fp8Tables tables;
    const uint16_t* t = dtype == DType::fp8_e4m3 ? tables.e4m3.data() : tables.e5m2.data();
    for (int e = 0; e < 2; ++e) {
      const uint8_t* src = e ? src1 : src0;
      uint16_t* dst = e ? k1 : k0;
      int d = 0;
      if (src)
        for (; d < width; ++d) dst[d] = t[src[d]];
      for (; d < wp; ++d) dst[d] = 0;
    }
  }
  const auto* p0 = reinterpret_cast<const uint16_t*>(src0);
  const auto* p1 = reinterpret_cast<const uint16_t*>(src1);
  for (int d = 0; d < wp; d += 32) {
    __m512i va, vb;
    if (bf16) {
      const __mmask32 m = d + 32 <= width ? ~__mmask32(0) : d < width ? __mmask32((uint64_t(1) << (width - d)) - 1) : 0;
      va = p0 ? _mm512_maskz_loadu_epi16(m, p0 + d) : _mm512_setzero_si512();
      vb = p1 ? _mm512_maskz_loadu_epi16(m, p1 + d) : _mm512_setzero_si512();
      if (store_k) {
        _mm512_store_si512(k0 + d, va);
        _mm512_store_si512(k1 + d, vb);
      }
    } else {
      va = _mm512_load_si512(k0 + d);
      vb = _mm512_load_si512(k1 + d);
    }
    if (d < rank) {  // rank % 32 == 0
      // bf16 inf / NaN: every exponent bit set.
      if (_mm512_cmpeq_epi16_mask(_mm512_and_si512(va, exp_bits), exp_bits)) nonfinite |= 1u;
      if (_mm512_cmpeq_epi16_mask(_mm512_and_si512(vb, exp_bits), exp_bits)) nonfinite |= 2u;
      _mm512_store_si512(vp_row + 2 * d, _mm512_permutex2var_epi16(va, lo, vb));
      _mm512_store_si512(vp_row + 2 * d + 32, _mm512_permutex2var_epi16(va, hi, vb));
    }
  }
  return nonfinite;
}

ATTN_AMX_TARGET inline __m512 bf16_hi_as_f32(__m512i bf16_pairs_lo) { return _mm512_castsi512_ps(_mm512_slli_epi32(bf16_pairs_lo, 16)); }

/// q rows (fp32, times 1/mul) → per group and 32-wide d block, a B tile of bf16 pairs: tile row
/// i holds (q[r][2i], q[r][2i+1]) in column r. Writes the hi part and the lo residue (the next
/// tile set); returns whether any lo is needed (q not exactly bf16, i.e. f32 / f16 I/O).
ATTN_AMX_TARGET bool pack_q(const float* q, int rows, int width, float inv_mul, int groups, int kd_blocks, uint16_t* qp) {
  const __m512 vinv = _mm512_set1_ps(inv_mul), tiny = _mm512_set1_ps(0x1p-20f);
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  bool need_lo = false;
  for (int g = 0; g < groups; ++g) {
    for (int kd = 0; kd < kd_blocks; ++kd) {
      __m512i hi[16], lo[16];
      const int d0 = kd * 32, nd = std::min(32, width - d0);
      const __mmask16 m0 = nd >= 16 ? __mmask16(0xffff) : __mmask16((1u << nd) - 1);
      const __mmask16 m1 = nd >= 32 ? __mmask16(0xffff) : nd > 16 ? __mmask16((1u << (nd - 16)) - 1) : __mmask16(0);
      for (int r = 0; r < kRows; ++r) {
        const int row = g * kRows + r;
        if (row >= rows) {
          hi[r] = lo[r] = _mm512_setzero_si512();
          continue;
        }
        const float* src = q + size_t(row) * width + d0;
        const __m512 u0 = _mm512_mul_ps(_mm512_maskz_loadu_ps(m0, src), vinv);
        const __m512 u1 = _mm512_mul_ps(_mm512_maskz_loadu_ps(m1, src + 16), vinv);
        const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(u1, u0);  // [u0 as bf16 | u1 as bf16]
        const __m512 h0 = bf16_hi_as_f32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)));
        const __m512 h1 = bf16_hi_as_f32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)));
        const __m512 e0 = _mm512_sub_ps(u0, h0), e1 = _mm512_sub_ps(u1, h1);
        // Residue of q * mul / mul (~2^-24 |u|) does not count: bf16 I/O needs no lo part.
        need_lo |= _mm512_cmp_ps_mask(_mm512_and_ps(e0, abs_mask), _mm512_mul_ps(_mm512_and_ps(u0, abs_mask), tiny), _CMP_GT_OQ) != 0;
        need_lo |= _mm512_cmp_ps_mask(_mm512_and_ps(e1, abs_mask), _mm512_mul_ps(_mm512_and_ps(u1, abs_mask), tiny), _CMP_GT_OQ) != 0;
        hi[r] = h;
        lo[r] = (__m512i)_mm512_cvtne2ps_pbh(e1, e0);
      }
      // Lane i of row r is the pair (q[r][2i], q[r][2i+1]); the tile wants row i, lane r.
      simd::transpose16(hi);
      simd::transpose16(lo);
      uint16_t* th = qp + (size_t(g) * 2 * kd_blocks + kd) * kTile;
      uint16_t* tl = qp + ((size_t(g) * 2 + 1) * kd_blocks + kd) * kTile;
      for (int i = 0; i < 16; ++i) {
        _mm512_store_si512(th + i * 32, hi[i]);
        _mm512_store_si512(tl + i * 32, lo[i]);
      }
    }
  }
  return need_lo;
}

/// A chunk's V pair rows with the non-finite values of the keys in `bad` (bit t = key t) set to
/// 0, those values kept in `held` ([kKeys][rank], bf16). The tile product then adds exact zeros
/// for rows that do not see those keys, as with finite values (bit for bit).
ATTN_AMX_TARGET void hold_nonfinite(uint16_t* vp, unsigned bad, int rank, uint16_t* held) {
  for (int t = 0; t < kKeys; ++t) {
    if (!((bad >> t) & 1)) continue;
    uint16_t* v = vp + size_t(t / 2) * rank * 2 + (t & 1);
    for (int c = 0; c < rank; ++c) {
      held[size_t(t) * rank + c] = v[2 * c];
      if (bf16_nonfinite(v[2 * c])) v[2 * c] = 0;
    }
  }
}

/// Adds p · V for the held non-finite values of each key a row sees (t < lim[r] - c0): the inf /
/// NaN the tile product left out, so rows that see them get them as the reference does.
ATTN_AMX_TARGET void add_nonfinite(const uint16_t* p, const uint16_t* plo, unsigned bad, const uint16_t* held,
                                   const int32_t* lim, int c0, int rank, float* acc) {
  for (int r = 0; r < kRows; ++r) {
    for (int t = 0; t < std::min(kKeys, lim[r] - c0); ++t) {
      if (!((bad >> t) & 1)) continue;
      float w = bf16_to_f32(p[r * kKeys + t]);
      if (plo) w += bf16_to_f32(plo[r * kKeys + t]);
      const uint16_t* v = held + size_t(t) * rank;
      for (int c = 0; c < rank; ++c)
        if (bf16_nonfinite(v[c])) acc[size_t(r) * rank + c] += w * bf16_to_f32(v[c]);
    }
  }
}
