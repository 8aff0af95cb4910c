#pragma once
/// The paged KV cache of one layer, its block allocator, and the plain view kernels read.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "attn/device.hpp"
#include "attn/metadata.hpp"
#include "attn/numeric.hpp"
#include "attn/tensor.hpp"
#include "attn/types.hpp"

namespace attn {

/// Token-major (vLLM's default NHD: [blocks][2][block_size][kv_heads][head]) or
/// head-major (HND: [blocks][2][kv_heads][block_size][head], contiguous rows per head).
/// MLA: [blocks][block_size][width], K and V share the entry (V = first head_size_v values).
/// HND_PAIRS: HND's shape and per-(block, kv head) runs, ordered for dot products along lanes:
/// K dim-pair-major, K[d/2][t][2] (a 64-byte bf16 line = 16 keys × 2 dims), V key-pair-major,
/// V[t/2][d][2] (a line = 2 keys × 16 dims); fp8 caches use the same element order. Needs even
/// head sizes and a block size that is a multiple of 16 (layout_fits_sizes).
enum class KVLayout : uint8_t { NHD, HND, MLA, HND_PAIRS };
std::string_view to_string(KVLayout l);

struct KVCacheSpec;
/// Whether `spec`'s sizes can hold its layout: HND_PAIRS needs an even head size and V width and
/// a block size that is a multiple of 16; the other layouts hold any size. KVCacheSpec::validate
/// refuses a spec where this is false; BackendDescriptor::cache_spec gives it another layout.
bool layout_fits_sizes(const KVCacheSpec& spec);

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
/// x = H·(D·x): what write_kv stores (before rounding) and what q becomes. Inline like the two
/// below, so the kernels' ISA builds vectorise them (they run once per query and output row).
inline void rotate(float* x, int32_t n) {
  const float* s = rht_signs();
  for (int32_t i = 0; i < n; ++i) x[i] *= s[i];
  hadamard(x, n);
}
/// x = D·(H·x) / n: the inverse of rotate.
inline void unrotate(float* x, int32_t n) {
  hadamard(x, n);
  const float* s = rht_signs();
  const float inv = 1.0f / float(n);
  for (int32_t i = 0; i < n; ++i) x[i] = x[i] * s[i] * inv;
}
/// The query the format attends with: rotate, then each value rounded to the query's dtype (vLLM's
/// single_rht(q.float()).to(q.dtype); float32 stays as rotated). Every reader applies it.
inline void rotate_query(float* q, int32_t n, DType q_dtype) {
  rotate(q, n);
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
void rotate(float* x, int32_t d);
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

struct KVCacheSpec {
  int32_t num_blocks = 0;
  int32_t block_size = 16;
  int32_t num_kv_heads = 8;
  int32_t head_size = 128;        // K width (MLA: kv_lora_rank + rope)
  int32_t head_size_v = 0;        // 0 = head_size (MLA: kv_lora_rank)
  DType dtype = DType::bfloat16;  // storage dtype (fp8_e4m3 / fp8_e5m2 for fp8 caches)
  KVCacheDType kv_cache_dtype = KVCacheDType::auto_;
  KVLayout layout = KVLayout::NHD;
  bool per_head_scales = false;   // one scale per kv head (else one per tensor)

  int32_t v_width() const { return head_size_v ? head_size_v : head_size; }
  /// int4_per_token_head: two codes per stored byte.
  bool int4() const { return kv_cache_dtype == KVCacheDType::int4_per_token_head; }
  /// nvfp4 / nvfp4_4over6: e2m1 codes and e4m3 block scales in each row (see nvfp4).
  bool nvfp4() const { return is_nvfp4(kv_cache_dtype); }
  /// turboquant_*: one slot of K then V bytes per (token, KV head) (see turboquant); the shape is
  /// vLLM's [num_blocks, num_kv_heads, block_size, slot] (HND) or [num_blocks, block_size,
  /// num_kv_heads, slot] (NHD), no K / V dimension.
  bool turboquant() const { return is_turboquant(kv_cache_dtype); }
  /// Stored elements of one K (is_v false) or V row: the width, halved for int4 caches, codes
  /// plus block scales for nvfp4 ones, a slot's K or V part for turboquant ones (bytes).
  int32_t stored_width(bool is_v) const {
    const int32_t w = is_v ? v_width() : head_size;
    if (turboquant()) {
      const turboquant::Format f = turboquant::format_of(kv_cache_dtype);
      return is_v ? turboquant::value_bytes(f, w) : turboquant::key_bytes(f, w);
    }
    return int4() ? w / 2 : nvfp4() ? nvfp4::row_bytes(w) : w;
  }
  /// A per-token-head cache (see token_head): its scales are two more arrays beside the codes.
  bool token_scales() const { return has_token_head_scales(kv_cache_dtype); }
  /// Bytes of those two scale arrays (0 for other caches).
  int64_t token_scale_bytes() const;
  std::vector<int64_t> shape() const;  // the declared cache shape
  /// Rejects sizes outside attn's limits (include/attn/limits.hpp) and inconsistent MLA specs.
  void validate() const;
  /// Bytes of the cache this spec declares (validated; a product beyond 64 bits is an error).
  int64_t bytes() const;
  std::string to_string() const;
  bool operator==(const KVCacheSpec&) const = default;
};

/// What kernels read: base pointer plus element strides. Scales are 1 for 16-bit caches.
/// K element (block b, token t, head h, dim d) = base[kv_element_offset(view, b, t, h, d, false)]:
/// b*block_stride + t*token_stride + h*head_stride + d for NHD / HND / MLA; V adds v_offset.
/// HND_PAIRS rows are not contiguous (token_stride is the entry width there): address it
/// through kv_element_offset only.
struct PagedKV {
  void* base = nullptr;
  DType dtype = DType::bfloat16;
  KVLayout layout = KVLayout::NHD;
  int32_t num_blocks = 0, block_size = 0, num_kv_heads = 0, head_size = 0, head_size_v = 0;
  int64_t block_stride = 0, token_stride = 0, head_stride = 0, v_offset = 0;
  const float* k_scales = nullptr;  // [num_kv_heads] (per-tensor scale replicated)
  const float* v_scales = nullptr;  // [num_kv_heads]
  /// fp8_ds_mla entries (see ds_mla above): strides count bytes, the per-tensor scales are 1 and
  /// unused, each entry carries its own tile scales.
  bool ds_mla = false;
  /// Per-token-head caches: the K and V scales, one fp32 per (block, slot, KV head) in vLLM's
  /// [num_blocks][block_size][num_kv_heads] order (token_scale_index); null for other caches,
  /// whose per-tensor / per-head scales above apply (they are 1 here).
  float* k_token_scales = nullptr;
  float* v_token_scales = nullptr;
  /// int4_per_token_head (see int4_head): a row is head_size / 2 bytes of packed codes; the token
  /// scales carry the zero points.
  bool int4 = false;
  /// nvfp4 caches (see nvfp4): a row is nvfp4::row_bytes(width) bytes of codes and block scales;
  /// k_scales / v_scales are the global scales.
  bool nvfp4 = false;
  bool nvfp4_four_over_six = false;  // nvfp4_4over6: write_kv's block-scale search
  /// turboquant caches (see turboquant): K at kv_element_offset(..., 0, false), V at v_offset
  /// bytes after it in the same slot; `tq` is the preset.
  bool turboquant = false;
  turboquant::Format tq;
};

/// Where the scale of slot t of block b, KV head h, lies in k_token_scales / v_token_scales.
inline int64_t token_scale_index(const PagedKV& v, int64_t b, int64_t t, int64_t h) {
  return (b * v.block_size + t) * v.num_kv_heads + h;
}

/// The element index of K (is_v = false) or V dim d of token t, kv head h, in block b: the one
/// way every strided reader and writer addresses the cache.
inline int64_t kv_element_offset(const PagedKV& v, int64_t b, int64_t t, int64_t h, int64_t d, bool is_v) {
  const int64_t run = b * v.block_stride + h * v.head_stride + (is_v ? v.v_offset : 0);
  if (v.layout != KVLayout::HND_PAIRS) return run + t * v.token_stride + d;
  if (is_v) return run + (t >> 1) * 2 * v.token_stride + 2 * d + (t & 1);  // V[t/2][d][2]
  return run + (d >> 1) * 2 * int64_t(v.block_size) + 2 * t + (d & 1);     // K[d/2][t][2]
}

/// Copies the stored bytes of one K or V vector (n values, its storage dtype) to `dst` as a
/// contiguous row: row readers serve HND_PAIRS caches through it (int4: its n / 2 code bytes;
/// nvfp4: its nvfp4::row_bytes(n) bytes).
inline void gather_kv_vector(const PagedKV& v, int64_t b, int64_t t, int64_t h, bool is_v, int32_t n, void* dst) {
  const std::size_t es = dtype_size(v.dtype);
  const char* base = static_cast<const char*>(v.base);
  char* out = static_cast<char*>(dst);
  if (v.int4) return int4_head::load_vector(v, b, t, h, is_v, n, static_cast<uint8_t*>(dst));
  if (v.nvfp4) {  // NHD / HND rows of codes and block scales
    std::memcpy(out, base + kv_element_offset(v, b, t, h, 0, is_v), std::size_t(nvfp4::row_bytes(n)));
    return;
  }
  if (v.layout != KVLayout::HND_PAIRS) {
    std::memcpy(out, base + kv_element_offset(v, b, t, h, 0, is_v) * int64_t(es), std::size_t(n) * es);
    return;
  }
  for (int32_t i = 0; i < n; ++i) std::memcpy(out + std::size_t(i) * es, base + kv_element_offset(v, b, t, h, i, is_v) * int64_t(es), es);
}

/// Host memory an engine laid out itself, K and V rows at its own element strides (storage dtype;
/// each row's dims contiguous): K (block b, token t, head h, dim d) at k + b*block + t*token +
/// h*head + d, V at the same place + v_offset. Serves vLLM's per-token [K | V] rows in any of its
/// block layouts, and dense [batch, heads, seq, dim] K / V tensors as one block per sequence. Every
/// element the spec addresses must lie in [memory, memory + bytes).
struct StridedKV {
  void* k = nullptr;
  int64_t block = 0, token = 0, head = 0, v_offset = 0;  // v_offset may be negative (V before K)
  const void* memory = nullptr;
  std::size_t bytes = 0;
};

/// One layer's paged cache: allocated on a device (host memory unless an allocator says else),
/// viewed through view() by the backends that read that device.
class KVCache {
 public:
  explicit KVCache(const KVCacheSpec& spec);
  /// Wraps storage an engine owns (its KV tensor): `external` holds spec.bytes() bytes laid out
  /// contiguously as spec.shape(), 64-byte aligned, and must outlive this cache. Nothing is
  /// allocated or copied; writes and fills go to the engine's memory.
  KVCache(const KVCacheSpec& spec, void* external);
  /// Reads and writes an engine's memory in place at its strides (see StridedKV): spec.layout NHD
  /// or HND (which only names the token order in messages); nothing is allocated or copied.
  KVCache(const KVCacheSpec& spec, const StridedKV& memory);
  /// A cache in `allocator`'s memory (zeroed), e.g. Registry::allocator(DeviceKind::cuda).
  KVCache(const KVCacheSpec& spec, std::shared_ptr<DeviceAllocator> allocator);
  KVCache(KVCache&&) noexcept;
  KVCache& operator=(KVCache&&) noexcept;
  ~KVCache();

  const KVCacheSpec& spec() const { return spec_; }
  /// Where the bytes live; view()'s base and scale pointers are that device's.
  DeviceKind device() const { return device_ ? device_.allocator()->device() : DeviceKind::cpu; }
  PagedKV view() const;
  void* data() const { return device_ ? device_.data() : external_ ? external_ : storage_.data(); }
  std::size_t bytes() const { return device_ ? device_.bytes() : external_ ? external_bytes_ : storage_.bytes(); }
  bool owns_storage() const { return external_ == nullptr; }
  /// Made over an engine's strided memory (StridedKV): it has no dense shape of its own.
  bool strided() const { return strided_.k != nullptr; }
  /// Copies the bytes and scales of a cache of the same spec, on any device (upload, download).
  void copy_from(const KVCache& other);

  /// Quantization scales (dequantized = stored * scale). Per tensor: one value; per head:
  /// num_kv_heads values. Must be finite and > 0.
  void set_scales(const std::vector<float>& k_scales, const std::vector<float>& v_scales);
  const std::vector<float>& k_scales() const { return k_scales_; }  // always num_kv_heads entries
  const std::vector<float>& v_scales() const { return v_scales_; }

  /// Writes new k/v ([num_tokens, num_kv_heads, head_size(_v)], float32/16/bf16) into the
  /// slots of `md.slot_mapping` (negative slots skipped), quantizing for fp8 caches. Host caches
  /// only: a device cache is written by its backend's run (ForwardArgs::new_k / new_v).
  void write(const TensorView& k, const TensorView& v, const BatchMetadata& md);
  /// write() for metadata that already passed BatchMetadata::validate against this cache's
  /// geometry (a StepPlan's): skips the per-slot checks, so it allocates nothing.
  void write_validated(const TensorView& k, const TensorView& v, const BatchMetadata& md);
  /// fp8 caches: how many values every write() so far clamped to the fp8 range (±448 for e4m3),
  /// i.e. |value / scale| beyond it: a count that grows means the scales are too small.
  /// Per-token-head and turboquant caches: how many NaN / infinite values were written (their
  /// vectors read NaN; turboquant_k8v4 also counts keys clamped at ±448). nvfp4 caches: NaN /
  /// infinite values (their blocks of 16 read NaN) and values clamped under a saturated block scale.
  int64_t saturated_values() const { return saturated_; }
  /// Per-token-head caches: the K and V scale arrays ([num_blocks][block_size][num_kv_heads] fp32
  /// each): attn's own, or the engine's after use_token_scales. Null for other caches.
  float* k_token_scales() const { return k_token_scales_; }
  float* v_token_scales() const { return v_token_scales_; }
  /// Per-token-head caches over an engine's memory: read and write the engine's own scale arrays
  /// (host fp32, contiguous, num_blocks·block_size·num_kv_heads each) in place of attn's. They
  /// must outlive this cache.
  void use_token_scales(float* k_scales, float* v_scales);
  /// Copies a whole block (copy-on-write support).
  void copy_block(int32_t src, int32_t dst);
  /// Fills every element with `value` (tests: NaN poison in unused slots).
  void fill(float value);

 private:
  void upload_scales();
  void check_write_tensors(const TensorView& k, const TensorView& v, const BatchMetadata& md) const;
  void store(const TensorView& k, const TensorView& v, const BatchMetadata& md);  // no checks
  KVCacheSpec spec_;
  Buffer storage_;               // host caches attn allocated
  void* external_ = nullptr;     // engine-owned host storage (KVCache(spec, external))
  std::size_t external_bytes_ = 0;
  StridedKV strided_;            // engine-laid-out host storage (KVCache(spec, StridedKV))
  DeviceMemory device_;          // device caches: the bytes ...
  DeviceMemory device_scales_;   // ... and [2, num_kv_heads] scales (k then v)
  std::vector<float> k_scales_, v_scales_;
  Buffer token_scale_storage_;   // per-token-head caches: attn's own K then V scales
  float* k_token_scales_ = nullptr;
  float* v_token_scales_ = nullptr;
  int64_t saturated_ = 0;
  void init_scales();            // per-tensor scales 1, and the token scales of a per-token-head cache
};

/// Reference-counted block allocator: shared prefixes hold one block in several tables.
class BlockAllocator {
 public:
  explicit BlockAllocator(int32_t num_blocks);
  int32_t allocate();                 // throws attn::Error when the pool is exhausted
  void retain(int32_t block);         // one more owner
  void release(int32_t block);        // one fewer owner; back to the pool at zero
  int32_t ref_count(int32_t block) const;
  int32_t num_free() const;
  int32_t num_blocks() const { return int32_t(refs_.size()); }

 private:
  void check_id(int32_t block, const char* arg) const;
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;
};

/// One sequence's block list with copy-on-write on append.
class SequenceBlocks {
 public:
  SequenceBlocks(BlockAllocator& alloc, int32_t block_size) : alloc_(&alloc), block_size_(block_size) {}
  ~SequenceBlocks();
  SequenceBlocks(SequenceBlocks&&) noexcept;
  SequenceBlocks(const SequenceBlocks&) = delete;

  /// Reserves room for `n` more tokens. If the last block is shared, it is copied first
  /// (through `cache`, if given) so the append never writes into another sequence's block.
  void append(int64_t n, KVCache* cache = nullptr);
  /// A new sequence sharing every block of this one (prefix sharing).
  SequenceBlocks fork() const;
  int64_t num_tokens() const { return tokens_; }
  const std::vector<int32_t>& block_ids() const { return blocks_; }

 private:
  BlockAllocator* alloc_;
  int32_t block_size_;
  int64_t tokens_ = 0;
  std::vector<int32_t> blocks_;
};

}  // namespace attn
