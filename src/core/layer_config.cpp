#include "attn/layer_config.hpp"

#include <cmath>
#include <functional>
#include <type_traits>
#include <sstream>

#include "attn/checked.hpp"
#include "attn/error.hpp"
#include "attn/limits.hpp"
#include "core/names.hpp"

namespace attn {
namespace {

const detail::NameTable<MambaType>& mamba_table() {
  using M = MambaType;
  static const detail::NameTable<M> t = {{M::mamba1, "mamba1"},
                                         {M::mamba2, "mamba2"},
                                         {M::short_conv, "short_conv"},
                                         {M::linear_attention, "linear_attention"},
                                         {M::gdn_attention, "gdn_attention"},
                                         {M::custom, "custom"}};
  return t;
}

// One visitor over every field keeps printing, hashing and JSON in sync with the struct.
template <typename F>
void for_each_field(const LayerConfig& c, F&& f) {
  f("num_heads", c.num_heads);
  f("num_kv_heads", c.num_kv_heads);
  f("head_size", c.head_size);
  f("head_size_v", c.head_size_v);
  f("dtype", to_string(c.dtype));
  f("kv_cache_dtype", to_string(c.kv_cache_dtype));
  f("block_size", c.block_size);
  f("attn_type", to_string(c.attn_type));
  f("sliding_window", c.sliding_window);
  f("logits_soft_cap", c.logits_soft_cap);
  f("use_alibi", c.use_alibi);
  f("has_sink", c.has_sink);
  f("use_mla", c.use_mla);
  f("use_sparse", c.use_sparse);
  f("use_mm_prefix", c.use_mm_prefix);
  f("use_per_head_quant_scales", c.use_per_head_quant_scales);
  f("is_attention_free", c.is_attention_free);
  f("use_block_sparse", c.use_block_sparse);
  f("bs_block_size", c.bs_block_size);
  f("bs_local_blocks", c.bs_local_blocks);
  f("bs_vert_stride", c.bs_vert_stride);
  f("bs_head_sliding_step", c.bs_head_sliding_step);
  f("kv_lora_rank", c.kv_lora_rank);
  f("qk_rope_head_dim", c.qk_rope_head_dim);
  f("qk_nope_head_dim", c.qk_nope_head_dim);
  f("v_head_dim", c.v_head_dim);
  f("index_topk", c.index_topk);
  f("use_non_causal", c.use_non_causal);
  f("use_batch_invariant", c.use_batch_invariant);
  f("use_kv_connector", c.use_kv_connector);
}

template <typename T>
std::string field_text(const T& v) {
  if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
  else if constexpr (std::is_convertible_v<T, std::string_view>) return std::string(v);
  else { std::ostringstream os; os << v; return os.str(); }
}

}  // namespace

std::string LayerConfig::kind() const {
  if (attn_type == AttnType::encoder_only) return "encoder_only_attention";
  if (attn_type == AttnType::encoder_decoder) return "cross_attention";
  if (use_mla) return has_sliding_window() ? "sliding_window_mla" : "mla_attention";
  if (has_sliding_window()) return "sliding_window";
  return "full_attention";
}

void LayerConfig::validate() const {
  if (is_attention_free) return;  // an attention-free placeholder carries no shape
  check_heads("num_heads", num_heads);
  check_heads("num_kv_heads", num_kv_heads);
  require(num_heads % num_kv_heads == 0, "num_kv_heads", num_kv_heads,
          "a divisor of num_heads=" + std::to_string(num_heads));
  if (use_mla) {
    // The MLA dims first: head_size is derived from them, so an overflowed sum would otherwise be
    // reported as a nonsensical head_size instead of the dimension the caller got wrong.
    require(kv_lora_rank > 0, "kv_lora_rank", kv_lora_rank, "> 0 for an MLA layer");
    check_head_size("kv_lora_rank", kv_lora_rank);
    check_head_size("qk_rope_head_dim", qk_rope_head_dim, 0);
    check_head_size("qk_nope_head_dim", qk_nope_head_dim, 0);
    check_head_size("v_head_dim", v_head_dim, 0);
    const int64_t latent = checked_sum("kv_lora_rank + qk_rope_head_dim", {kv_lora_rank, qk_rope_head_dim});
    require(head_size == latent, "head_size", head_size,
            "kv_lora_rank + qk_rope_head_dim = " + std::to_string(latent) + " for an MLA layer");
  }
  check_head_size("head_size", head_size);
  check_head_size("head_size_v", head_size_v, 0);
  require(block_size >= 0 && block_size <= limits::kMaxBlockSize, "block_size", block_size,
          ">= 0 (0 = backend's preferred) and <= " + std::to_string(limits::kMaxBlockSize));
  require(sliding_window >= 0, "sliding_window", sliding_window, ">= 0 (0 = none)");
  require(logits_soft_cap >= 0.0f && std::isfinite(logits_soft_cap), "logits_soft_cap", logits_soft_cap,
          "a finite value >= 0 (0 = none)");
  require(dtype == DType::float32 || dtype == DType::float16 || dtype == DType::bfloat16, "dtype", attn::to_string(dtype),
          "one of float32, float16, bfloat16 (fp8 / int8 are storage types)");
  if (use_sparse) require(index_topk > 0, "index_topk", index_topk, "> 0 for a sparse layer");
  if (use_block_sparse) {
    require(bs_block_size > 0, "bs_block_size", bs_block_size, "> 0 for a block-sparse layer");
    check_block_size("bs_block_size", bs_block_size);
    require(bs_local_blocks > 0, "bs_local_blocks", bs_local_blocks, "> 0 for a block-sparse layer");
    require(bs_vert_stride > 0, "bs_vert_stride", bs_vert_stride, "> 0 for a block-sparse layer");
    require(bs_head_sliding_step >= 0, "bs_head_sliding_step", bs_head_sliding_step,
            ">= 0 (0 = the same pattern for every head)");
  }
}

std::string LayerConfig::to_string() const {
  std::string s = "LayerConfig(";
  bool first = true;
  for_each_field(*this, [&](const char* name, const auto& v) {
    s += (first ? "" : ", ") + std::string(name) + "=" + field_text(v);
    first = false;
  });
  return s + ")";
}

std::size_t LayerConfig::hash() const {
  std::size_t h = 1469598103934665603ull;
  for_each_field(*this, [&](const char*, const auto& v) {
    using T = std::decay_t<decltype(v)>;
    std::size_t x;
    if constexpr (std::is_convertible_v<T, std::string_view>) x = std::hash<std::string_view>{}(std::string_view(v));
    else x = std::hash<T>{}(v);
    h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  });
  return h;
}

std::string_view to_string(MambaType t) { return detail::name_of(mamba_table(), t); }
MambaType parse_mamba_type(std::string_view name) { return detail::parse_name(mamba_table(), name, "mamba type"); }
const std::vector<MambaType>& all_mamba_types() {
  static const auto v = detail::values_of(mamba_table());
  return v;
}

// Exposed for select/ JSON rendering without duplicating the field list.
namespace detail {
void layer_config_fields(const LayerConfig& c, const std::function<void(const char*, const std::string&, char)>& f) {
  for_each_field(c, [&](const char* name, const auto& v) {
    using T = std::decay_t<decltype(v)>;
    const char kind = std::is_same_v<T, bool> ? 'b' : std::is_convertible_v<T, std::string_view> ? 's' : 'n';
    f(name, field_text(v), kind);
  });
}
}  // namespace detail

}  // namespace attn
