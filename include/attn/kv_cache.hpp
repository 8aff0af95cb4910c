#pragma once
/// The paged KV cache of one layer, its block allocator, and the plain view kernels read.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "attn/block_allocator.hpp"
#include "attn/device.hpp"
#include "attn/kv_formats.hpp"
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
inline constexpr KVLayout kLastKVLayout = KVLayout::HND_PAIRS;  // the name table is checked against it
std::string_view to_string(KVLayout l);
KVLayout parse_kv_layout(std::string_view name);  // "NHD", "HND", "MLA", "HND_PAIRS"

struct KVCacheSpec;
/// Whether `spec`'s sizes can hold its layout: HND_PAIRS needs an even head size and V width and
/// a block size that is a multiple of 16; the other layouts hold any size. KVCacheSpec::validate
/// refuses a spec where this is false; BackendDescriptor::cache_spec gives it another layout.
bool layout_fits_sizes(const KVCacheSpec& spec);


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

}  // namespace attn
