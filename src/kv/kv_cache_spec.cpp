// KVCacheSpec: the shape, size and validation of a cache description (layouts and the sizes each
// needs), apart from the cache object itself (kv_cache.cpp).
#include "attn/kv_cache.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "attn/checked.hpp"
#include "attn/error.hpp"
#include "attn/limits.hpp"
#include "attn/numeric.hpp"
#include "cpu/threads.hpp"
#include "kv/store_run.hpp"
#include "kv/kv_entry.hpp"

namespace attn {
using kv::entry_width;

namespace {
/// One size a layout needs to be a multiple of something (the message names it when it is not).
struct SizeNeed {
  const char* argument;
  int32_t (*value)(const KVCacheSpec&);
  int32_t multiple;
  const char* expected;
};
/// HND_PAIRS: K lines pair dims, V lines pair keys, 16 keys per line.
constexpr SizeNeed kPairSizeNeeds[] = {
    {"head_size", [](const KVCacheSpec& s) { return s.head_size; }, 2, "an even head size for the HND_PAIRS layout"},
    {"head_size_v", [](const KVCacheSpec& s) { return s.v_width(); }, 2, "an even V width for the HND_PAIRS layout"},
    {"block_size", [](const KVCacheSpec& s) { return s.block_size; }, 16, "a multiple of 16 for the HND_PAIRS layout"},
};

/// HND_PAIRS orders single values; an nvfp4 row's codes and block scales, a turboquant slot's
/// packed K and V, stay together. (validate refuses the pair first, naming the layout;
/// layout_fits_sizes sends it to `otherwise`.)
constexpr SizeNeed kNvfp4PairNeed = {"layout", [](const KVCacheSpec&) { return 1; }, 2,
                                     "a cache of single values for the HND_PAIRS layout (nvfp4 and turboquant keep NHD or HND)"};

/// The first size need of `s`'s layout that `s` misses; null when its sizes fit.
const SizeNeed* unmet_size_need(const KVCacheSpec& s) {
  if (s.layout != KVLayout::HND_PAIRS) return nullptr;
  if (s.nvfp4() || s.turboquant()) return &kNvfp4PairNeed;
  for (const SizeNeed& n : kPairSizeNeeds)
    if (n.value(s) % n.multiple != 0) return &n;
  return nullptr;
}
}  // namespace

bool layout_fits_sizes(const KVCacheSpec& spec) { return unmet_size_need(spec) == nullptr; }

std::vector<int64_t> KVCacheSpec::shape() const {
  const int64_t w = entry_width(*this);
  if (turboquant()) {  // vLLM's slots: no K / V dimension
    if (layout == KVLayout::NHD) return {num_blocks, block_size, num_kv_heads, w};
    return {num_blocks, num_kv_heads, block_size, w};
  }
  switch (layout) {
    case KVLayout::NHD: return {num_blocks, 2, block_size, num_kv_heads, w};
    case KVLayout::HND:
    case KVLayout::HND_PAIRS: return {num_blocks, 2, num_kv_heads, block_size, w};  // pairs: same extent, inner order differs
    case KVLayout::MLA: return {num_blocks, block_size, w};
  }
  return {};
}

std::string KVCacheSpec::to_string() const {
  auto s = shape();
  std::string dims;
  for (std::size_t i = 0; i < s.size(); ++i) dims += (i ? ", " : "") + std::to_string(s[i]);
  return std::string(attn::to_string(layout)) + " [" + dims + "] " + std::string(attn::to_string(dtype)) +
         " (kv_cache_dtype " + std::string(attn::to_string(kv_cache_dtype)) + ")";
}

void KVCacheSpec::validate() const {
  check_num_blocks("num_blocks", num_blocks);
  check_block_size("block_size", block_size);
  check_heads("num_kv_heads", num_kv_heads);
  check_head_size("head_size", head_size);
  check_head_size("head_size_v", head_size_v, 0);
  require(dtype != DType::int32 && dtype != DType::int64 && (dtype != DType::int8 || token_scales() || nvfp4() || turboquant()), "cache dtype",
          attn::to_string(dtype), "one of float32, float16, bfloat16, fp8_e4m3, fp8_e5m2 (int8: byte formats such as int8_per_token_head)");
  if (token_scales()) {
    const std::string what = " for kv_cache_dtype " + std::string(attn::to_string(kv_cache_dtype));
    const DType want = kv_storage_dtype(kv_cache_dtype, DType::bfloat16);
    require(dtype == want, "cache dtype", attn::to_string(dtype), std::string(attn::to_string(want)) + what);
    require(layout != KVLayout::MLA, "layout", attn::to_string(layout), "NHD, HND or HND_PAIRS" + what);
    require(!per_head_scales, "per_head_scales", "true", "false" + what + " (each slot carries its own scales)");
  }
  if (layout == KVLayout::MLA) {
    require(num_kv_heads == 1, "num_kv_heads", num_kv_heads, "1 for the MLA latent cache");
    require(v_width() <= head_size, "head_size_v", head_size_v, "<= head_size for the MLA latent cache");
  }
  if (kv_cache_dtype == KVCacheDType::fp8_ds_mla) {
    const std::string what = " for kv_cache_dtype fp8_ds_mla (its fixed entry: 512 fp8 latent + 64 bf16 rope values)";
    require(layout == KVLayout::MLA, "layout", attn::to_string(layout), "MLA" + what);
    require(head_size == ds_mla::kRank + ds_mla::kRope, "head_size", head_size, std::to_string(ds_mla::kRank + ds_mla::kRope) + what);
    require(v_width() == ds_mla::kRank, "head_size_v", head_size_v, std::to_string(ds_mla::kRank) + what);
    require(dtype == DType::fp8_e4m3, "cache dtype", attn::to_string(dtype), "fp8_e4m3 (one element per entry byte)" + what);
  }
  // The format's own shape rules (int4: powers of two; nvfp4: multiples of 16; turboquant: ...).
  for (const KvFormatUnmet& u : kv_format_unmet(kv_cache_dtype, head_size, v_width(), per_head_scales)) fail_check(u.argument, u.value, u.expected);
  if (nvfp4()) {
    const std::string what = " for kv_cache_dtype " + std::string(attn::to_string(kv_cache_dtype));
    require(dtype == DType::int8, "cache dtype", attn::to_string(dtype), "int8 (bytes of codes and block scales)" + what);
    require(layout == KVLayout::NHD || layout == KVLayout::HND, "layout", attn::to_string(layout),
            "NHD or HND" + what + " (a row keeps its codes and block scales together)");
  }
  if (turboquant()) {
    const std::string what = " for kv_cache_dtype " + std::string(attn::to_string(kv_cache_dtype));
    require(dtype == DType::int8, "cache dtype", attn::to_string(dtype), "int8 (bytes of K and V slots)" + what);
    require(layout == KVLayout::NHD || layout == KVLayout::HND, "layout", attn::to_string(layout),
            "NHD or HND" + what + " (one slot of K then V per token and KV head)");
  }
  if (const SizeNeed* n = unmet_size_need(*this)) fail_check(n->argument, n->value(*this), n->expected);
}

int64_t KVCacheSpec::bytes() const {
  validate();
  return checked_nbytes("KVCache", dtype, shape());
}

int64_t KVCacheSpec::token_scale_bytes() const {
  if (!token_scales()) return 0;
  validate();
  return checked_nbytes("KVCache token scales", DType::float32, {2, num_blocks, block_size, num_kv_heads});
}

}  // namespace attn
