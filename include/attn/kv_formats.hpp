#pragma once
/// The byte formats of the quantized KV-cache dtypes vLLM names (fp8_ds_mla, per-token-head int8 /
/// fp8 / int4, NVFP4, TurboQuant): their constants and per-vector codecs, which the cache's
/// writes, the kernels and the fp64 reference share (docs/kv-cache-formats.md).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "attn/numeric.hpp"
#include "attn/tensor.hpp"
#include "attn/types.hpp"

namespace attn {

/// kv_cache_dtype fp8_ds_mla (DeepSeek V3.2's MLA cache, vLLM's byte layout): one 656-byte
/// entry per token = 512 fp8_e4m3 latent values quantized per tile of 128 values, the 4 tile
/// scales (fp32, dequantized = stored * scale), then 64 bf16 rope values (not quantized).
/// The cache's storage dtype is fp8_e4m3 with one element per byte: shape [blocks][block_size][656].
namespace ds_mla {
constexpr int kRank = 512, kRope = 64, kTile = 128, kTiles = kRank / kTile;
constexpr int kScalesOffset = kRank;                          // bytes
constexpr int kRopeOffset = kScalesOffset + kTiles * 4;       // bytes
constexpr int kEntryBytes = kRopeOffset + kRope * 2;          // 656
/// One entry from kRank + kRope floats: tile scale = amax / 448 (amax 0 → the smallest normal
/// float, so an all-zero tile stays zero), latent / scale rounded to e4m3, rope rounded to bf16.
void quantize_entry(const float* src, void* entry);
/// The kRank + kRope values an entry holds (latent dequantized tile by tile, rope widened).
void dequantize_entry(const void* entry, float* dst);
inline float tile_scale(const void* entry, int tile) {
  float s;
  std::memcpy(&s, static_cast<const uint8_t*>(entry) + kScalesOffset + 4 * tile, 4);
  return s;
}
}  // namespace ds_mla

/// Per-token-head quantization (kv_cache_dtype int8_per_token_head / fp8_per_token_head),
/// vLLM's format (vllm/v1/attention/ops/triton_reshape_and_cache_flash.py,
/// _reshape_cache_per_token_head): each (slot, KV head) vector of K and of V is stored as codes
/// (int8, or fp8 e4m3) with one fp32 scale = max(absmax / max code, 1e-6), code = value · (1 /
/// scale) (int8: rounded half away from zero, clamped to [-128, 127]; e4m3: round to nearest
/// even, saturating at ±448); value = code · scale. The scales live beside the codes in two
/// [num_blocks][block_size][num_kv_heads] fp32 arrays, K's and V's.
namespace token_head {
constexpr float kMinScale = 1e-6f;
/// The largest code magnitude: 127 (int8), 448 (fp8_e4m3).
float max_code(DType storage);
/// Quantizes one vector of n floats into `codes` (storage dtype int8 or fp8_e4m3) and returns its
/// scale. A vector holding a NaN or an infinity gets a NaN scale and zero codes, so it reads as
/// NaN, as an unquantized cache holding it would make the output; `nonfinite` counts such values.
float quantize(const float* src, int32_t n, DType storage, void* codes, int64_t* nonfinite);
}  // namespace token_head

/// int4_per_token_head, vLLM's format (vllm/v1/attention/ops/int4_per_token_head.py): each (slot,
/// KV head) vector x of n dims (a power of two) is rotated, y = H·(D·x) (D: vLLM's ±1 signs, H: the
/// unnormalized Walsh-Hadamard matrix, H·H = n·I; fp32, then rounded to the written dtype), and y
/// is quantized asymmetrically: scale = max((max − min) / 15, 1e-6), zero point z = clamp(round(−min
/// / scale), 0, 15), code = clamp(round(y / scale + z), 0, 15) (rounding half away from zero), two
/// codes per byte (even dim in the low nibble). z hides in the low 4 mantissa bits of the stored
/// fp32 scale; y reads back as (code − z) · (stored scale with those bits cleared). Attention runs
/// in the rotated space: q·k = (H·D·q)·y / n, and an output o' over the rotated V is D·H·o' / n.
namespace int4_head {
constexpr int kMaxCode = 15;
/// vLLM's RHT signs: torch.bernoulli(0.5) on a CPU generator seeded 0x9E3779B9, i.e. mt19937
/// words whose 24-bit fraction is below 0.5 give +1. Element i is the same for every n > i.
float rht_sign(int32_t i);
/// The signs of every dim attn's limits allow (rht_sign(i) = rht_signs()[i]).
const float* rht_signs();
/// x = H·x in place (n a power of two), the butterfly order of vLLM's CPU transform (float:
/// the format's; double: the tests' fp64 oracles).
template <class T>
void hadamard(T* x, int32_t n) {
  for (int32_t h = 1; h < n; h <<= 1)
    for (int32_t i = 0; i < n; i += 2 * h)
      for (int32_t j = i; j < i + h; ++j) {
        const T a = x[j], b = x[j + h];
        x[j] = a + b, x[j + h] = a - b;
      }
}
/// A Hadamard transform in place: hadamard<float>, or a kernel build's vector form of the same
/// butterflies (the kernels pass theirs: they run it once per query and output row).
using HadamardFn = void (*)(float*, int32_t);
/// x = H·(D·x): what write_kv stores (before rounding) and what q becomes.
inline void rotate(float* x, int32_t n, HadamardFn had = &hadamard<float>) {
  const float* s = rht_signs();
  for (int32_t i = 0; i < n; ++i) x[i] *= s[i];
  had(x, n);
}
/// x = D·(H·x) / n: the inverse of rotate.
inline void unrotate(float* x, int32_t n, HadamardFn had = &hadamard<float>) {
  had(x, n);
  const float* s = rht_signs();
  const float inv = 1.0f / float(n);
  for (int32_t i = 0; i < n; ++i) x[i] = x[i] * s[i] * inv;
}
/// The query the format attends with: rotate, then each value rounded to the query's dtype (vLLM's
/// single_rht(q.float()).to(q.dtype); float32 stays as rotated). Every reader applies it.
inline void rotate_query(float* q, int32_t n, DType q_dtype, HadamardFn had = &hadamard<float>) {
  rotate(q, n, had);
  if (q_dtype == DType::float32) return;
  if (q_dtype == DType::bfloat16) {
    for (int32_t i = 0; i < n; ++i) q[i] = bf16_to_f32(f32_to_bf16(q[i]));
    return;
  }
  for (int32_t i = 0; i < n; ++i) {
    char r[4];
    store_from_float(r, q_dtype, 0, q[i]);
    q[i] = load_as_float(r, q_dtype, 0);
  }
}
/// Quantizes a rotated vector: packed codes to `codes` (n / 2 bytes); returns the stored scale
/// (zero point in its low bits). A NaN or infinity gives a NaN scale and zero codes (counted).
float quantize(const float* rotated, int32_t n, uint8_t* codes, int64_t* nonfinite);
/// The stored scale's two parts.
inline float scale_of(float stored) {
  uint32_t u;
  std::memcpy(&u, &stored, 4);
  u &= ~uint32_t(0xF);
  float s;
  std::memcpy(&s, &u, 4);
  return s;
}
inline int zero_point(float stored) {
  uint32_t u;
  std::memcpy(&u, &stored, 4);
  return int(u & 0xF);
}
/// The rotated values a stored vector holds: (code − z) · scale.
void dequantize(const uint8_t* codes, float stored_scale, int32_t n, float* rotated);
}  // namespace int4_head

struct PagedKV;
namespace int4_head {
/// The n / 2 code bytes of one stored K (is_v false) or V vector of n values (slot t of block b, KV
/// head h), in vLLM's order (byte j: dims 2j, 2j + 1), from NHD / HND rows or from HND_PAIRS runs,
/// where K byte j of key t sits at j · block_size + t and V dims x of keys 2u, 2u + 1 share byte
/// u · 2w + x (w the entry width; key 2u in the low nibble).
void load_vector(const PagedKV& v, int64_t b, int64_t t, int64_t h, bool is_v, int32_t n, uint8_t* codes);
/// An HND_PAIRS cache's K (is_v false) or V run of block b, KV head h: the K bytes j · block_size
/// + t, the V bytes u · 2w + x above are offsets from it.
const uint8_t* pairs_run(const PagedKV& v, int64_t b, int64_t h, bool is_v);
/// Writes them there (HND_PAIRS V: only this key's nibbles change).
void store_vector(const PagedKV& v, int64_t b, int64_t t, int64_t h, bool is_v, int32_t n, const uint8_t* codes);
}  // namespace int4_head

/// nvfp4 / nvfp4_4over6, vLLM's NVFP4 KV cache (csrc/libtorch_stable/nvfp4_kv_cache_kernels.cu,
/// vllm/utils/torch_utils.py nvfp4_kv_cache_full_dim): each (slot, KV head) vector of n dims (a
/// multiple of 16) is n / 2 bytes of e2m1 codes (two per byte, even dim in the low nibble; bit 3
/// the sign, magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6) and n / 16 e4m3 block scales, one per 16
/// dims: sf = e4m3(max|x| / 6 / g), code = e2m1(x · 1 / (sf · g)) (round to nearest even,
/// saturating at 6), g the cache's per-tensor (or per-head) scale, vLLM's k_scale / v_scale.
/// nvfp4_4over6 also tries max|x| / 4 and keeps whichever scale reconstructs the 16 values with
/// the smaller squared error. A value reads e2m1 · sf · g. vLLM keeps a block's codes and its
/// scales in two regions of the page (V's scales swizzled for its GPU kernel); attn's row is the
/// vector's codes then its scales, n / 2 + n / 16 bytes (docs/kv-cache-formats.md).
namespace nvfp4 {
constexpr int kGroup = 16;           // values per block scale
constexpr uint8_t kNanScale = 0x7F;  // e4m3 NaN: a group that held a NaN or an infinity reads NaN
/// Bytes of one stored vector of n values (codes, then scales).
constexpr int32_t row_bytes(int32_t n) { return n / 2 + n / kGroup; }
/// The value of an e2m1 code (0..15).
inline float e2m1_value(int code) {
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  return (code & 8) ? -kMag[code & 7] : kMag[code & 7];
}
/// x to the nearest e2m1 code, ties to the even code, beyond ±6 saturated (cvt.rn.satfinite.e2m1).
uint8_t e2m1_code(float x);
/// Quantizes n values into one stored row (codes, then scales), given inv_g = 1 / g (vLLM's
/// global scale; its arithmetic order); returns how many values lay beyond what a saturated block
/// scale (448) holds. A group holding a NaN or an infinity gets the NaN scale and zero codes (it
/// reads NaN); `nonfinite` counts such values.
int64_t quantize(const float* x, int32_t n, float inv_g, bool four_over_six, uint8_t* row, int64_t* nonfinite);
/// The n values a stored row holds, before the global scale: e2m1 · sf.
void dequantize(const uint8_t* row, int32_t n, float* dst);
}  // namespace nvfp4

/// turboquant_k8v4 / _4bit_nc / _k3v4_nc / _3bit_nc, vLLM's TurboQuant cache
/// (vllm/model_executor/layers/quantization/turboquant/, vllm/v1/attention/ops/triton_turboquant_store.py,
/// vllm/v1/attention/backends/turboquant_attn.py): one slot per (token, KV head) holds K then V.
/// K, 3 or 4 bits: norm = |x| (stored fp16), y = H·(x / (norm + 1e-8)) with H the orthonormal
/// Sylvester Hadamard matrix (d a power of two), each y_i stored as the index of its Lloyd-Max
/// centroid for N(0, 1/d) (vLLM's solver; bucketized at the midpoints); read back as norm · c / |c|
/// in the rotated space ("norm correction"), where the query is rotated once. K, 8 bits: e4m3 codes
/// of x (no scale). V, 3 or 4 bits: uniform over [min, max], scale = max((max − min) / (2^b − 1),
/// 1e-8), code = trunc((v − min) / scale + 0.5) clamped, scale and min stored fp16; read back code ·
/// scale + min. Indices and codes: 4 bits two per byte (even dim low), 3 bits eight per 3 bytes
/// (index i at bit 3i, little-endian). The slot is key bytes then value bytes, rounded up to even.
namespace turboquant {
struct Format {
  int key_bits = 4;    // 8: e4m3 keys, no rotation; 3 / 4: centroid indices of the rotated unit vector
  int value_bits = 4;  // 3 / 4
  bool key_fp8() const { return key_bits == 8; }
};
/// The preset a turboquant_* name stands for (vLLM's TQ_PRESETS; the 3 / 4-bit key presets all
/// renormalize the centroid vector).
Format format_of(KVCacheDType k);
int32_t key_bytes(const Format& f, int32_t d);    // fp8: d; else ceil(d · bits / 8) + 2 (the norm)
int32_t value_bytes(const Format& f, int32_t d);  // ceil(d · bits / 8) + 4 (scale, min)
int32_t slot_bytes(const Format& f, int32_t d);   // key + value bytes, rounded up to even
/// The 2^bits Lloyd-Max centroids for N(0, 1/d), ascending (vLLM's solve_lloyd_max, the same
/// double arithmetic, then float32), and the float32 midpoints between neighbours. Computed once.
const float* centroids(int32_t d, int bits);
const float* midpoints(int32_t d, int bits);
/// x = H·x / √d in place (H·H = d·I: its own inverse), d a power of two.
void rotate(float* x, int32_t d, int4_head::HadamardFn had = &int4_head::hadamard<float>);
/// One vector into a slot's K part (`dst`: key_bytes) or V part (value_bytes). A vector holding a
/// NaN or an infinity reads NaN (NaN norm / scale) and is counted in `bad`; so are fp8 key values
/// beyond ±448 (clamped).
void quantize_key(const float* x, int32_t d, const Format& f, uint8_t* dst, int64_t* bad);
void quantize_value(const float* x, int32_t d, const Format& f, uint8_t* dst, int64_t* bad);
/// What the attention reads: K as norm · c / |c| in the rotated space (fp8: the e4m3 values), V
/// as code · scale + min.
void dequantize_key(const uint8_t* src, int32_t d, const Format& f, float* dst);
void dequantize_value(const uint8_t* src, int32_t d, const Format& f, float* dst);
}  // namespace turboquant

}  // namespace attn
