#pragma once
/// Core vocabulary: element dtypes, KV-cache dtype names (vLLM's CacheDType), attention types.
/// Every enum has parse/print; parse errors list the valid names.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attn {

/// Element types of tensors. fp8_e4m3 / fp8_e5m2 / int8 are storage-only (caches).
enum class DType : uint8_t { float32, float16, bfloat16, fp8_e4m3, fp8_e5m2, int8, int32, int64 };

std::string_view to_string(DType d);
DType parse_dtype(std::string_view name);          // accepts "float32", "fp32", "half", "bf16", ...
std::size_t dtype_size(DType d);
const std::vector<DType>& all_dtypes();

/// KV-cache dtype names as vLLM spells them. "auto" means "same as the model dtype".
enum class KVCacheDType : uint8_t {
  auto_, float16, bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc, fp8_ds_mla,
  turboquant_k8v4, turboquant_4bit_nc, turboquant_k3v4_nc, turboquant_3bit_nc,
  int4_per_token_head, int8_per_token_head, fp8_per_token_head, nvfp4, nvfp4_4over6
};

std::string_view to_string(KVCacheDType k);
/// Throws `Error("Invalid kv_cache_dtype: 'x'. Valid values are: auto, float16, ...")`.
KVCacheDType parse_kv_cache_dtype(std::string_view name);
const std::vector<KVCacheDType>& all_kv_cache_dtypes();
/// True for anything other than auto / float16 / bfloat16.
bool is_quantized(KVCacheDType k);
/// True for the per-token-head formats (int8_per_token_head, fp8_per_token_head,
/// int4_per_token_head): every (slot, KV head) vector carries its own fp32 scale, computed as it
/// is written (vLLM's KVQuantMode INT8 / FP8 / INT4_PER_TOKEN_HEAD).
bool has_token_head_scales(KVCacheDType k);
/// nvfp4 and nvfp4_4over6: one layout (e2m1 codes with e4m3 block scales of 16 values), two ways
/// of choosing the block scales as it is written.
bool is_nvfp4(KVCacheDType k);
/// The four turboquant_* presets (one slot of rotated, Lloyd-Max quantized K and uniform V).
bool is_turboquant(KVCacheDType k);
/// The rule a kv dtype's format puts on a K or V width, as an "expected ..." text, or empty when
/// `width` meets it: int4_per_token_head rotates vectors by a Walsh-Hadamard transform (a power of
/// two); nvfp4 scales each 16 values (a multiple of 16); turboquant rotates its 3 / 4-bit keys by
/// a Hadamard matrix (a power of two of at least 8) and packs 3-bit codes in eights (k8v4: even).
/// KVCacheSpec::validate and the selector's checks both ask here.
std::string kv_width_unmet(KVCacheDType k, int32_t width);
/// One rule of a kv dtype's format that a layer's shape breaks: the argument ("head_size",
/// "head_size_v", "per_head_scales"), its value and what the format expects.
struct KvFormatUnmet {
  std::string argument, value, expected;
};
/// Every rule of k's format these sizes break, in order: the width rule (kv_width_unmet) on
/// head_size, then on head_size_v; turboquant's shared slot (head_size_v = head_size) and its own
/// scales (no per-head scales). KVCacheSpec::validate fails on the first; the selector gives each
/// as a reason to every backend that declares k.
std::vector<KvFormatUnmet> kv_format_unmet(KVCacheDType k, int32_t head_size, int32_t head_size_v, bool per_head_scales);
/// Every name attn stores as one code per value (16-bit, fp8 with per-tensor / per-head scales,
/// int8 / fp8 per token head): auto, float16, bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc,
/// int8_per_token_head, fp8_per_token_head. A dense backend that reads all of them declares this.
const std::vector<KVCacheDType>& per_element_kv_cache_dtypes();
/// The names attn stores in a packed byte format with a width rule (kv_width_unmet):
/// int4_per_token_head, nvfp4, nvfp4_4over6 and the four turboquant presets. A backend that reads
/// every format declares per_element_kv_cache_dtypes() and these.
const std::vector<KVCacheDType>& packed_kv_cache_dtypes();
/// The storage dtype of a cache with this kv dtype for a model of dtype `model`
/// ("auto" → model dtype, "fp8" and "fp8_per_token_head" → fp8_e4m3, "int8_per_token_head" →
/// int8, "int4_per_token_head" → int8 bytes holding two codes each, "nvfp4" / "nvfp4_4over6" → int8
/// bytes of codes and block scales, "turboquant_*" → int8 bytes of slots). Throws for names attn
/// stores no other way.
DType kv_storage_dtype(KVCacheDType k, DType model);

/// Attention types (vLLM AttentionType values).
enum class AttnType : uint8_t { decoder, encoder, encoder_only, encoder_decoder };
std::string_view to_string(AttnType t);
AttnType parse_attn_type(std::string_view name);
const std::vector<AttnType>& all_attn_types();

/// Joins names with ", " — used by every "valid values are" message.
std::string join(const std::vector<std::string>& parts, std::string_view sep = ", ");

}  // namespace attn
