#include "attn/types.hpp"

#include "core/names.hpp"

namespace attn {
namespace {

const detail::NameTable<DType>& dtype_table() {
  static const detail::NameTable<DType> t = {
      {DType::float32, "float32"}, {DType::float16, "float16"}, {DType::bfloat16, "bfloat16"},
      {DType::fp8_e4m3, "fp8_e4m3"}, {DType::fp8_e5m2, "fp8_e5m2"}, {DType::int8, "int8"},
      {DType::int32, "int32"},     {DType::int64, "int64"}};
  return t;
}

const detail::NameTable<KVCacheDType>& kv_table() {
  using K = KVCacheDType;
  static const detail::NameTable<K> t = {
      {K::auto_, "auto"}, {K::float16, "float16"}, {K::bfloat16, "bfloat16"}, {K::fp8, "fp8"},
      {K::fp8_e4m3, "fp8_e4m3"}, {K::fp8_e5m2, "fp8_e5m2"}, {K::fp8_inc, "fp8_inc"},
      {K::fp8_ds_mla, "fp8_ds_mla"}, {K::turboquant_k8v4, "turboquant_k8v4"},
      {K::turboquant_4bit_nc, "turboquant_4bit_nc"}, {K::turboquant_k3v4_nc, "turboquant_k3v4_nc"},
      {K::turboquant_3bit_nc, "turboquant_3bit_nc"}, {K::int4_per_token_head, "int4_per_token_head"},
      {K::int8_per_token_head, "int8_per_token_head"}, {K::fp8_per_token_head, "fp8_per_token_head"},
      {K::nvfp4, "nvfp4"}, {K::nvfp4_4over6, "nvfp4_4over6"}};
  return t;
}

const detail::NameTable<AttnType>& attn_type_table() {
  static const detail::NameTable<AttnType> t = {{AttnType::decoder, "decoder"},
                                                {AttnType::encoder, "encoder"},
                                                {AttnType::encoder_only, "encoder_only"},
                                                {AttnType::encoder_decoder, "encoder_decoder"}};
  return t;
}

}  // namespace

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

std::string_view to_string(DType d) { return detail::name_of(dtype_table(), d); }

DType parse_dtype(std::string_view name) {
  // Common aliases users type (torch / numpy spellings).
  static const std::vector<std::pair<std::string_view, DType>> aliases = {
      {"fp32", DType::float32}, {"float", DType::float32}, {"fp16", DType::float16},
      {"half", DType::float16}, {"bf16", DType::bfloat16}, {"torch.float32", DType::float32},
      {"torch.float16", DType::float16}, {"torch.bfloat16", DType::bfloat16}};
  for (auto& [a, d] : aliases) if (a == name) return d;
  return detail::parse_name(dtype_table(), name, "dtype");
}

std::size_t dtype_size(DType d) {
  switch (d) {
    case DType::float32: case DType::int32: return 4;
    case DType::float16: case DType::bfloat16: return 2;
    case DType::fp8_e4m3: case DType::fp8_e5m2: case DType::int8: return 1;
    case DType::int64: return 8;
  }
  return 0;
}

const std::vector<DType>& all_dtypes() {
  static const auto v = detail::values_of(dtype_table());
  return v;
}

std::string_view to_string(KVCacheDType k) { return detail::name_of(kv_table(), k); }
KVCacheDType parse_kv_cache_dtype(std::string_view name) { return detail::parse_name(kv_table(), name, "kv_cache_dtype"); }
const std::vector<KVCacheDType>& all_kv_cache_dtypes() {
  static const auto v = detail::values_of(kv_table());
  return v;
}

bool is_quantized(KVCacheDType k) {
  return k != KVCacheDType::auto_ && k != KVCacheDType::float16 && k != KVCacheDType::bfloat16;
}

bool has_token_head_scales(KVCacheDType k) {
  return k == KVCacheDType::int8_per_token_head || k == KVCacheDType::fp8_per_token_head ||
         k == KVCacheDType::int4_per_token_head;
}

bool is_nvfp4(KVCacheDType k) { return k == KVCacheDType::nvfp4 || k == KVCacheDType::nvfp4_4over6; }
bool is_turboquant(KVCacheDType k) {
  return k == KVCacheDType::turboquant_k8v4 || k == KVCacheDType::turboquant_4bit_nc || k == KVCacheDType::turboquant_k3v4_nc ||
         k == KVCacheDType::turboquant_3bit_nc;
}

std::string kv_width_unmet(KVCacheDType k, int32_t width) {
  const std::string_view name = to_string(k);  // the texts are built only for a width that breaks a rule
  if (k == KVCacheDType::int4_per_token_head && !(width >= 2 && (width & (width - 1)) == 0))
    return "a power of two for kv_cache_dtype " + std::string(name) + " (its Hadamard rotation)";
  if (is_nvfp4(k) && width % 16 != 0) return "a multiple of 16 for kv_cache_dtype " + std::string(name) + " (a block scale per 16 values)";
  if (k == KVCacheDType::turboquant_k8v4 && width % 2 != 0) return "an even size for kv_cache_dtype " + std::string(name) + " (4-bit values in pairs)";
  if (is_turboquant(k) && k != KVCacheDType::turboquant_k8v4 && !(width >= 8 && (width & (width - 1)) == 0))
    return "a power of two >= 8 for kv_cache_dtype " + std::string(name) + " (its Hadamard rotation)";
  return {};
}

const std::vector<KVCacheDType>& per_element_kv_cache_dtypes() {
  using K = KVCacheDType;
  static const std::vector<K> v = {K::auto_, K::float16, K::bfloat16, K::fp8, K::fp8_e4m3, K::fp8_e5m2, K::fp8_inc,
                                   K::int8_per_token_head, K::fp8_per_token_head};
  return v;
}

std::vector<KvFormatUnmet> kv_format_unmet(KVCacheDType k, int32_t head_size, int32_t head_size_v, bool per_head_scales) {
  std::vector<KvFormatUnmet> out;
  if (std::string want = kv_width_unmet(k, head_size); !want.empty()) {
    out.push_back({"head_size", std::to_string(head_size), std::move(want)});
  } else if (std::string v_want = kv_width_unmet(k, head_size_v); !v_want.empty()) {
    out.push_back({"head_size_v", std::to_string(head_size_v), std::move(v_want)});
  }
  if (is_turboquant(k)) {  // one slot holds a token's K and V, with its own norm and scales
    const std::string what = " for kv_cache_dtype " + std::string(to_string(k));
    if (head_size_v != head_size)
      out.push_back({"head_size_v", std::to_string(head_size_v), "head_size=" + std::to_string(head_size) + what + " (K and V share a slot)"});
    if (per_head_scales) out.push_back({"per_head_scales", "true", "false" + what + " (each slot carries its own norm and scales)"});
  }
  return out;
}

const std::vector<KVCacheDType>& packed_kv_cache_dtypes() {
  using K = KVCacheDType;
  static const std::vector<K> v = {K::int4_per_token_head, K::nvfp4,           K::nvfp4_4over6,      K::turboquant_k8v4,
                                   K::turboquant_4bit_nc,  K::turboquant_k3v4_nc, K::turboquant_3bit_nc};
  return v;
}

DType kv_storage_dtype(KVCacheDType k, DType model) {
  switch (k) {
    case KVCacheDType::auto_: return model;
    case KVCacheDType::float16: return DType::float16;
    case KVCacheDType::bfloat16: return DType::bfloat16;
    // fp8_ds_mla: entries of e4m3 latent bytes with their tile scales and bf16 rope inline
    // (KVCacheSpec); the cache is an array of bytes, stored as fp8_e4m3 elements.
    case KVCacheDType::fp8: case KVCacheDType::fp8_e4m3: case KVCacheDType::fp8_ds_mla: return DType::fp8_e4m3;
    case KVCacheDType::fp8_e5m2: return DType::fp8_e5m2;
    // fp8_inc (Intel Neural Compressor's fp8 KV cache, vLLM's Gaudi path): e4m3 codes with the
    // calibrated per-tensor scales, what vLLM allocates as torch.float8_e4m3fn.
    case KVCacheDType::fp8_inc: return DType::fp8_e4m3;
    case KVCacheDType::fp8_per_token_head: return DType::fp8_e4m3;
    case KVCacheDType::int8_per_token_head: return DType::int8;
    // int4_per_token_head: two 4-bit codes per byte (vLLM allocates torch.uint8); attn's byte
    // storage is int8 (KVCacheSpec::stored_width halves the row).
    case KVCacheDType::int4_per_token_head: return DType::int8;
    // nvfp4: bytes too (vLLM: torch.uint8), each row its e2m1 codes then its e4m3 block scales.
    case KVCacheDType::nvfp4: case KVCacheDType::nvfp4_4over6: return DType::int8;
    // turboquant: bytes of slots (vLLM: torch.uint8), K then V per (token, KV head).
    case KVCacheDType::turboquant_k8v4: case KVCacheDType::turboquant_4bit_nc:
    case KVCacheDType::turboquant_k3v4_nc: case KVCacheDType::turboquant_3bit_nc: return DType::int8;
    default:
      throw Error("kv_cache_dtype=" + std::string(to_string(k)) +
                  " has no dense storage type in attn: expected one of auto, float16, bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc, int8_per_token_head, fp8_per_token_head, int4_per_token_head, nvfp4, nvfp4_4over6, fp8_ds_mla (MLA)");
  }
}

std::string_view to_string(AttnType t) { return detail::name_of(attn_type_table(), t); }
AttnType parse_attn_type(std::string_view name) { return detail::parse_name(attn_type_table(), name, "attn_type"); }
const std::vector<AttnType>& all_attn_types() {
  static const auto v = detail::values_of(attn_type_table());
  return v;
}

}  // namespace attn
