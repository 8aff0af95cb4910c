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
#include "core/names.hpp"
#include "cpu/threads.hpp"
#include "kv/store_run.hpp"
#include "kv/kv_entry.hpp"

namespace attn {
using kv::entry_width;
using kv::is_ds_mla;

namespace {
constexpr detail::NameArray<KVLayout, 4> kKVLayoutNames = {
    {{KVLayout::NHD, "NHD"}, {KVLayout::HND, "HND"}, {KVLayout::MLA, "MLA"}, {KVLayout::HND_PAIRS, "HND_PAIRS"}}};
static_assert(detail::covers_enum(kKVLayoutNames, kLastKVLayout));
}  // namespace

std::string_view to_string(KVLayout l) { return detail::name_of(kKVLayoutNames, l); }
KVLayout parse_kv_layout(std::string_view name) { return detail::parse_name(kKVLayoutNames, name, "layout"); }

void KVCache::init_scales() {
  k_scales_.assign(std::size_t(spec_.num_kv_heads), 1.0f);
  v_scales_ = k_scales_;
  if (!spec_.token_scales()) return;
  const int64_t per = int64_t(spec_.num_blocks) * spec_.block_size * spec_.num_kv_heads;
  token_scale_storage_ = Buffer(DType::float32, {2, per});  // zeroed: an unwritten slot reads 0
  k_token_scales_ = static_cast<float*>(token_scale_storage_.data());
  v_token_scales_ = k_token_scales_ + per;
}

void KVCache::use_token_scales(float* k, float* v) {
  ATTN_REQUIRE(spec_.token_scales(), "kv_cache_dtype", to_string(spec_.kv_cache_dtype),
               "int8_per_token_head, fp8_per_token_head or int4_per_token_head for a cache with token scales");
  ATTN_REQUIRE(k != nullptr && v != nullptr, "token scales", "null", "the engine's K and V scale arrays");
  k_token_scales_ = k, v_token_scales_ = v;
  token_scale_storage_ = Buffer();
}

KVCache::KVCache(const KVCacheSpec& spec) : spec_(spec) {
  spec.bytes();  // validates, and refuses a shape whose byte count would wrap
  storage_ = Buffer(spec.dtype, spec.shape());
  init_scales();
}

KVCache::KVCache(const KVCacheSpec& spec, void* external) : spec_(spec), external_(external) {
  external_bytes_ = std::size_t(spec.bytes());
  require(external != nullptr, "external storage", "null", "a pointer to " + std::to_string(external_bytes_) + " bytes");
  // attn's own storage is 64-byte aligned and the kernels are built and tested on that.
  require(reinterpret_cast<std::uintptr_t>(external) % 64 == 0, "external storage address",
          reinterpret_cast<std::uintptr_t>(external), "a multiple of 64 bytes");
  init_scales();
}

namespace {
/// The element offsets (from the K base) of the first and last element `spec` addresses at
/// `m`'s strides, for K (is_v false) or V; the caller checks them against the memory.
std::pair<int64_t, int64_t> strided_extent(const KVCacheSpec& spec, const StridedKV& m, bool is_v) {
  const std::string what = is_v ? "V" : "K";
  const int64_t last = checked_sum("strided cache " + what + " extent",
                                   {checked_product("block stride", {int64_t(spec.num_blocks) - 1, m.block}),
                                    checked_product("token stride", {int64_t(spec.block_size) - 1, m.token}),
                                    checked_product("head stride", {int64_t(spec.num_kv_heads) - 1, m.head}),
                                    int64_t(spec.stored_width(is_v)) - 1});
  const int64_t first = is_v ? m.v_offset : 0;
  require(!is_v || m.v_offset <= kInt64Max - last, "v_offset", m.v_offset, "an offset the cache's extent fits after");
  return {first, first + last};
}
}  // namespace

KVCache::KVCache(const KVCacheSpec& spec, const StridedKV& m) : spec_(spec), strided_(m) {
  spec.validate();
  require(spec.layout == KVLayout::NHD || spec.layout == KVLayout::HND, "layout", attn::to_string(spec.layout),
          "NHD or HND for a cache over strided memory");
  require(!is_ds_mla(spec) && !spec.turboquant(), "kv_cache_dtype", attn::to_string(spec.kv_cache_dtype),
          "a per-element dtype for a strided cache (a turboquant cache is wrapped whole: KVCache(spec, external))");
  require(m.k != nullptr && m.memory != nullptr, "strided memory", "null", "the K base and the memory it lies in");
  require(m.block >= 0 && m.token >= 0 && m.head >= 0, "strides",
          std::to_string(m.block) + ", " + std::to_string(m.token) + ", " + std::to_string(m.head), "block, token, head strides >= 0");
  const int64_t es = int64_t(dtype_size(spec.dtype));
  const auto lo = reinterpret_cast<std::uintptr_t>(m.memory), k = reinterpret_cast<std::uintptr_t>(m.k);
  require(k >= lo && (k - lo) % std::uintptr_t(es) == 0 && k - lo < m.bytes, "strided K base", k - lo,
          "an element offset inside the " + std::to_string(m.bytes) + "-byte memory");
  const int64_t k_elem = int64_t(k - lo) / es, elems = int64_t(m.bytes / std::size_t(es));
  for (bool is_v : {false, true}) {
    const auto [first, last] = strided_extent(spec, m, is_v);
    if (first >= -k_elem && last < elems - k_elem) continue;
    std::string range = "[";
    range += std::to_string(k_elem + first);
    range += ", ";
    range += std::to_string(k_elem + last);
    range += "]";
    fail_check(is_v ? "V elements" : "K elements", range, "inside the memory's " + std::to_string(elems) + " elements");
  }
  external_ = const_cast<void*>(m.memory);
  external_bytes_ = m.bytes;
  init_scales();
}

KVCache::KVCache(const KVCacheSpec& spec, std::shared_ptr<DeviceAllocator> allocator) : spec_(spec) {
  require(allocator != nullptr, "allocator", "null", "a device allocator (host_allocator() or Registry::allocator)");
  const int64_t bytes = spec.bytes();
  if (allocator->device() == DeviceKind::cpu) {
    storage_ = Buffer(spec.dtype, spec.shape());
    init_scales();
    return;
  }
  require(!spec.token_scales() && !spec.nvfp4() && !spec.turboquant(), "kv_cache_dtype", attn::to_string(spec.kv_cache_dtype),
          "a dtype without per-token-head or block scales for a device cache (they are served on the CPU)");
  k_scales_.assign(std::size_t(spec.num_kv_heads), 1.0f);
  v_scales_ = k_scales_;
  device_ = DeviceMemory(allocator, std::size_t(bytes));
  allocator->memset(device_.data(), 0, device_.bytes());
  device_scales_ = DeviceMemory(allocator, 2 * k_scales_.size() * sizeof(float));
  upload_scales();
}

void KVCache::upload_scales() {
  if (!device_) return;
  std::vector<float> both = k_scales_;
  both.insert(both.end(), v_scales_.begin(), v_scales_.end());
  device_scales_.allocator()->copy(device_scales_.data(), both.data(), both.size() * sizeof(float), CopyKind::host_to_device);
}

void KVCache::copy_from(const KVCache& o) {
  require(!strided() && !o.strided(), "cache", "strided", "caches with attn's own layout (copy a strided cache row by row)");
  require(o.spec() == spec_, "cache.spec", o.spec().to_string(), "this cache's spec " + spec_.to_string());
  const bool to_dev = device() != DeviceKind::cpu, from_dev = o.device() != DeviceKind::cpu;
  if (to_dev) {
    device_.allocator()->copy(data(), o.data(), bytes(), from_dev ? CopyKind::device_to_device : CopyKind::host_to_device);
  } else if (from_dev) {
    o.device_.allocator()->copy(data(), o.data(), bytes(), CopyKind::device_to_host);
  } else {
    std::memcpy(data(), o.data(), bytes());
  }
  k_scales_ = o.k_scales_;
  v_scales_ = o.v_scales_;
  if (spec_.token_scales()) {
    const std::size_t per = std::size_t(spec_.token_scale_bytes()) / 2;
    std::memcpy(k_token_scales_, o.k_token_scales_, per);
    std::memcpy(v_token_scales_, o.v_token_scales_, per);
  }
  upload_scales();
}

KVCache::KVCache(KVCache&&) noexcept = default;
KVCache& KVCache::operator=(KVCache&&) noexcept = default;
KVCache::~KVCache() = default;

PagedKV KVCache::view() const {
  PagedKV v;
  v.base = data();
  v.dtype = spec_.dtype;
  v.layout = spec_.layout;
  v.num_blocks = spec_.num_blocks;
  v.block_size = spec_.block_size;
  if (strided()) {
    v.base = strided_.k;
    v.block_stride = strided_.block, v.token_stride = strided_.token, v.head_stride = strided_.head;
    v.v_offset = strided_.v_offset;
  }
  v.num_kv_heads = spec_.num_kv_heads;
  v.head_size = spec_.head_size;
  v.head_size_v = spec_.v_width();
  const int64_t w = entry_width(spec_), bs = spec_.block_size, h = spec_.num_kv_heads;
  if (!strided()) switch (spec_.layout) {
    case KVLayout::NHD:
      v.head_stride = w; v.token_stride = h * w; v.v_offset = bs * h * w; v.block_stride = 2 * bs * h * w;
      break;
    case KVLayout::HND:
    case KVLayout::HND_PAIRS:  // same runs; inside them kv_element_offset orders the pairs
      v.token_stride = w; v.head_stride = bs * w; v.v_offset = h * bs * w; v.block_stride = 2 * bs * h * w;
      break;
    case KVLayout::MLA:
      v.token_stride = w; v.head_stride = w; v.v_offset = 0; v.block_stride = bs * w;
      break;
  }
  v.k_scales = device_ ? static_cast<const float*>(device_scales_.data()) : k_scales_.data();
  v.v_scales = device_ ? static_cast<const float*>(device_scales_.data()) + spec_.num_kv_heads : v_scales_.data();
  v.ds_mla = is_ds_mla(spec_);
  v.k_token_scales = k_token_scales_, v.v_token_scales = v_token_scales_;
  v.int4 = spec_.int4();
  v.nvfp4 = spec_.nvfp4();
  if (spec_.turboquant()) {  // K then V in one slot of w bytes
    v.turboquant = true;
    v.tq = turboquant::format_of(spec_.kv_cache_dtype);
    v.v_offset = turboquant::key_bytes(v.tq, spec_.head_size);
    if (spec_.layout == KVLayout::NHD) {
      v.head_stride = w, v.token_stride = h * w, v.block_stride = bs * h * w;
    } else {
      v.token_stride = w, v.head_stride = bs * w, v.block_stride = h * bs * w;
    }
  }
  v.nvfp4_four_over_six = spec_.kv_cache_dtype == KVCacheDType::nvfp4_4over6;
  return v;
}

void KVCache::set_scales(const std::vector<float>& k, const std::vector<float>& v) {
  const std::size_t h = std::size_t(spec_.num_kv_heads);
  require(!spec_.token_scales() && !spec_.turboquant(), "kv_cache_dtype", to_string(spec_.kv_cache_dtype),
          "a cache with per-tensor or per-head scales: per-token-head and turboquant caches compute each slot's scales as it is written");
  auto check = [&](const std::vector<float>& s, const char* arg) {
    require(s.size() == 1 || s.size() == h, std::string(arg) + ".size()", s.size(),
            "1 (per tensor) or num_kv_heads = " + std::to_string(h) + " (per head)");
    require(s.size() == 1 || spec_.per_head_scales, std::string(arg) + ".size()", s.size(),
            "1: this cache was created without per-head scales");
    for (std::size_t i = 0; i < s.size(); ++i)
      // Values are stored as value / scale: below the smallest normal float, 1 / scale is inf and
      // every stored value saturates.
      require(std::isfinite(s[i]) && s[i] >= std::numeric_limits<float>::min(), std::string(arg) + "[" + std::to_string(i) + "]",
              s[i], "a finite scale >= 1.17549e-38 (the smallest normal float)");
  };
  check(k, "k_scale");
  check(v, "v_scale");
  k_scales_.assign(h, k[0]);
  v_scales_.assign(h, v[0]);
  if (k.size() == h) k_scales_ = k;
  if (v.size() == h) v_scales_ = v;
  upload_scales();
}

}  // namespace attn
