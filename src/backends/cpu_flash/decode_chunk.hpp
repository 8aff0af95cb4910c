// cpu_flash decode kernel: what a chunk of keys brings besides its K / V rows: byte formats
// (nvfp4, turboquant) unpacked into dense scratch rows, and the per-key factors of per-token-head,
// int4 and turboquant caches, one lane per key.
// Part of the decode kernel (decode_impl.hpp), compiled once per decode build inside the
// namespace its .cpp names (ATTN_CF_NS, with ATTN_CF_VBMI 0 or 1).
#pragma once
#include "backends/cpu_flash/decode_pairs.hpp"

namespace attn::cpu_flash::ATTN_CF_NS {

/// The n keys of a chunk (rows `tstride` bytes apart from k0, V v_off bytes after K) unpacked into
/// dense scratch rows: nvfp4 to bf16, turboquant to fp32 (each key up to the factor kf[j] that its
/// score takes, see unpack_tq_key_parts; 4-bit keys in even / odd order). VCodes (turboquant): V
/// rows as the bf16 of their codes instead, each key's scale and minimum to vsc[j] and vmin[j] (0
/// for the lanes past n). !Keys (turboquant's e4m3 keys, which the kernel reads in place): the
/// values only, kf[j] = 1.
template <Unpack U, bool VCodes = false, bool Keys = true>
inline void unpack_chunk(const KernelArgs& a, const TqCentroids& tqc, const char* k0, int64_t tstride, int64_t v_off, int n, int d,
                         char* krows, char* vrows, float* kf, float* vsc = nullptr, float* vmin = nullptr) {
  alignas(64) float ksq[kChunk];  // turboquant: each key's Σ c²
  for (int j = 0; j < n; ++j) {
    const uint8_t* kr = reinterpret_cast<const uint8_t*>(k0 + j * tstride);
    if constexpr (U == Unpack::nvfp4) {
      unpack_nvfp4(kr, d, reinterpret_cast<uint16_t*>(krows) + int64_t(j) * d);
      unpack_nvfp4(kr + v_off, d, reinterpret_cast<uint16_t*>(vrows) + int64_t(j) * d);
    } else {
      if constexpr (Keys) {
        const TqKeyParts kp = unpack_tq_key_parts(kr, d, a.kv.tq, tqc, reinterpret_cast<float*>(krows) + int64_t(j) * d, true);
        kf[j] = kp.norm, ksq[j] = kp.sq;
      } else {  // e4m3 keys read in place: their 2^8 is in the softmax scale (kE4m3Rebias)
        kf[j] = 1.0f;
      }
      if constexpr (VCodes)
        unpack_tq_value_codes(kr + v_off, d, a.kv.tq, reinterpret_cast<uint16_t*>(vrows) + int64_t(j) * d, vsc[j], vmin[j]);
      else
        unpack_tq_value(kr + v_off, d, a.kv.tq, reinterpret_cast<float*>(vrows) + int64_t(j) * d);
    }
  }
  if constexpr (U == Unpack::turboquant && Keys) {  // kf = norm / √(Σc² + 1e-16), 16 keys at a time (as tq_key_factor)
    for (int j = n; j < kChunk; ++j) kf[j] = 0.0f, ksq[j] = 1.0f;
    for (int j = 0; j < kChunk; j += 16)
      _mm512_store_ps(kf + j, _mm512_mul_ps(_mm512_load_ps(kf + j), _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_sqrt_ps(_mm512_add_ps(
                                                                               _mm512_load_ps(ksq + j), _mm512_set1_ps(1e-16f))))));
  }
  if constexpr (VCodes)
    for (int j = n; j < kChunk; ++j) vsc[j] = vmin[j] = 0.0f;
}

/// A chunk's per-key factors, one lane per key (lanes past its n keys: 0, masked), for keys [c, c + n)
/// of block table `bt`. Token: K scales times the softmax scale `sscale` (kts) and V scales (vts);
/// int4 (rotated vectors, see run) splits each stored scale into 16 · scale (kts also times sscale)
/// and the zero point's factor 1 + z/16 (kzb, vzb); turboquant: each key's factor kf[j] times
/// sscale (kts). Nothing for other caches.
/// Gather offsets (in floats) of 16 consecutive keys' per-token-head scales of one KV head: the
/// scales of a slot's heads are adjacent (vLLM's [blocks, block_size, num_kv_heads] layout).
inline __m512i scale_gather_offsets(const PagedKV& kv) {
  return _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(kv.num_kv_heads));
}

template <KvType T, bool Token, Unpack U>
inline void chunk_scales(const KernelArgs& a, const int32_t* bt, int32_t c, int h, int n, float sscale, const float* kf,
                         float* kts, float* vts, float* kzb, float* vzb) {
  const int bs = a.kv.block_size;
  if constexpr (T == KvType::i4) {  // A = 16 · scale · sscale, B = 1 + z/16; V: 16 · scale and 1 + z/16
    // 16 keys' stored scales at a time (num_kv_heads floats apart; a chunk is whole 16-key groups
    // of one block), split into the scale (low 4 bits cleared) and the zero point.
    const int64_t t0 = token_scale_index(a.kv, bt[c / bs], c % bs, h);
    const __m512i step = scale_gather_offsets(a.kv);
    const __m512i low = _mm512_set1_epi32(0xF);
    for (int j = 0; j < kPairChunk; j += 16) {
      if (j >= n) {  // lanes past the chunk: masked
        for (float* p : {kts, vts, kzb, vzb}) _mm512_store_ps(p + j, _mm512_setzero_ps());
        continue;
      }
      const float* kb = a.kv.k_token_scales + t0 + int64_t(j) * a.kv.num_kv_heads;
      const float* vb = a.kv.v_token_scales + t0 + int64_t(j) * a.kv.num_kv_heads;
      const __m512i kbits = _mm512_castps_si512(_mm512_i32gather_ps(step, kb, 4));
      const __m512i vbits = _mm512_castps_si512(_mm512_i32gather_ps(step, vb, 4));
      auto scale = [&](__m512i bits) { return _mm512_castsi512_ps(_mm512_andnot_si512(low, bits)); };
      auto zp = [&](__m512i bits) {
        return _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(bits, low)), _mm512_set1_ps(1.0f / 16.0f), _mm512_set1_ps(1.0f));
      };
      _mm512_store_ps(kts + j, _mm512_mul_ps(scale(kbits), _mm512_set1_ps(16.0f * sscale)));
      _mm512_store_ps(vts + j, _mm512_mul_ps(scale(vbits), _mm512_set1_ps(16.0f)));
      _mm512_store_ps(kzb + j, zp(kbits));
      _mm512_store_ps(vzb + j, zp(vbits));
    }
  } else if constexpr (U == Unpack::turboquant) {
    for (int j = 0; j < n; ++j) kts[j] = kf[j] * sscale;
    for (int j = n; j < kChunk; ++j) kts[j] = 0.0f;  // lanes past the chunk: masked
  } else if constexpr (Token) {  // 16 keys' scales per gather, as int4's above
    const int64_t t0 = token_scale_index(a.kv, bt[c / bs], c % bs, h);
    const __m512i step = scale_gather_offsets(a.kv);
    for (int j = 0; j < kPairChunk; j += 16) {
      const __mmask16 in = j >= n ? 0 : n - j >= 16 ? 0xFFFF : __mmask16((1u << (n - j)) - 1u);  // lanes past the chunk: 0, masked
      const int64_t at = t0 + int64_t(j < n ? j : 0) * a.kv.num_kv_heads;  // a lane-less group reads nothing
      _mm512_store_ps(kts + j, _mm512_mul_ps(_mm512_mask_i32gather_ps(_mm512_setzero_ps(), in, step, a.kv.k_token_scales + at, 4),
                                             _mm512_set1_ps(sscale)));
      _mm512_store_ps(vts + j, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), in, step, a.kv.v_token_scales + at, 4));
    }
  }
}

}  // namespace attn::cpu_flash::ATTN_CF_NS
