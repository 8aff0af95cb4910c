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

namespace attn {
namespace {

bool is_ds_mla(const KVCacheSpec& s) { return s.kv_cache_dtype == KVCacheDType::fp8_ds_mla; }

// Elements per entry (per head): fp8_ds_mla entries are bytes of a fixed layout.
int32_t entry_width(const KVCacheSpec& s) {
  if (s.turboquant()) return turboquant::slot_bytes(turboquant::format_of(s.kv_cache_dtype), s.head_size);  // K and V in one slot
  return is_ds_mla(s) ? ds_mla::kEntryBytes : std::max(s.stored_width(false), s.stored_width(true));
}

// One fp8_ds_mla entry from a [kRank + kRope] row of any float dtype.
void store_ds_mla_row(const void* src, DType sd, void* entry) {
  float row[ds_mla::kRank + ds_mla::kRope];
  for (int i = 0; i < ds_mla::kRank + ds_mla::kRope; ++i) row[i] = load_as_float(src, sd, i);
  ds_mla::quantize_entry(row, entry);
}

}  // namespace

std::string_view to_string(KVLayout l) {
  switch (l) {
    case KVLayout::NHD: return "NHD";
    case KVLayout::HND: return "HND";
    case KVLayout::MLA: return "MLA";
    case KVLayout::HND_PAIRS: return "HND_PAIRS";
  }
  return "?";
}

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

void KVCache::check_write_tensors(const TensorView& k, const TensorView& v, const BatchMetadata& md) const {
  ATTN_REQUIRE(!device_, "cache.device", "cuda",
               "a host cache (a device cache is written by its backend's run: ForwardArgs::new_k / new_v)");
  const bool mla = spec_.layout == KVLayout::MLA;
  const int64_t n = md.num_tokens;
  check_tensor(k, "k", 3, {DType::float32, DType::float16, DType::bfloat16}, {n, spec_.num_kv_heads, spec_.head_size});
  if (!mla)
    check_tensor(v, "v", 3, {DType::float32, DType::float16, DType::bfloat16}, {n, spec_.num_kv_heads, spec_.v_width()});
}

void KVCache::write(const TensorView& k, const TensorView& v, const BatchMetadata& md) {
  check_write_tensors(k, v, md);
  const int64_t n = md.num_tokens;
  ATTN_REQUIRE(int64_t(md.slot_mapping.size()) == n, "metadata.slot_mapping.size()", md.slot_mapping.size(),
               "num_tokens = " + std::to_string(n));
  check_slot_mapping(md.slot_mapping, int64_t(spec_.num_blocks) * spec_.block_size);
  store(k, v, md);
}

void KVCache::write_validated(const TensorView& k, const TensorView& v, const BatchMetadata& md) {
  // Runs per layer per step (run() with new K/V): O(1) checks, messages built only on failure.
  check_write_tensors(k, v, md);
  ATTN_REQUIRE(md.block_size == spec_.block_size, "metadata.block_size", md.block_size,
               "the cache's block_size " + std::to_string(spec_.block_size));
  ATTN_REQUIRE(int64_t(md.slot_mapping.size()) == md.num_tokens, "metadata.slot_mapping.size()", md.slot_mapping.size(),
               "num_tokens = " + std::to_string(md.num_tokens));
  store(k, v, md);
}

void KVCache::store(const TensorView& k, const TensorView& v, const BatchMetadata& md) {
  const bool mla = spec_.layout == KVLayout::MLA;
  const int64_t n = md.num_tokens;
  const PagedKV pv = view();
  const int64_t* slots = md.slot_mapping.data();
  const std::size_t kes = dtype_size(k.dtype), ves = mla ? 0 : dtype_size(v.dtype);
  if (pv.ds_mla) {  // one latent head; each entry carries its own tile scales, so nothing saturates
    char* base = static_cast<char*>(pv.base);
    for (int64_t t = 0; t < n; ++t) {
      if (slots[t] < 0) continue;
      const int64_t blk = slots[t] / spec_.block_size, off = slots[t] % spec_.block_size;
      store_ds_mla_row(static_cast<const char*>(k.data) + t * k.strides[0] * int64_t(kes), k.dtype,
                       base + blk * pv.block_stride + off * pv.token_stride);
    }
    return;
  }
  // Work items: chunks of kChunk tokens (whole 16-token K lines) x KV heads; inside a chunk, runs
  // of consecutive slots in one block go to the store routine at once. Slots are distinct
  // (BatchMetadata::validate), so items never write the same bytes.
  // int4 HND_PAIRS V bytes hold two keys' codes: one item per KV head writes all of them.
  const int64_t kChunk = pv.int4 && pv.layout == KVLayout::HND_PAIRS ? std::max<int64_t>(n, 1) : 64;
  const int32_t heads = spec_.num_kv_heads, hs = spec_.head_size, hv = spec_.v_width();
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const int64_t bytes = n * heads * (hs + (mla ? 0 : hv)) * int64_t(dtype_size(spec_.dtype));
  const int team = bytes >= (int64_t(1) << 20) ? cpu::team_size() : 1;  // small writes: threads cost more than they save
  // Bulk writes (>= 4 MiB: a 1024-token prompt of a Llama-3.1-8B layer) stream whole lines past the
  // caches: a regular store first reads the line it overwrites, which held the prompt's write to
  // 0.4-0.6 of a copy (Zen 4, Zen 5). Smaller writes (decode tokens, short prompts) stay in cache for the attend.
  const bool stream = bytes >= (int64_t(4) << 20);
  const kv::StoreRunFn store_run = kv::store_run();
  const int32_t bs = spec_.block_size;
  int64_t saturated = 0;
#pragma omp parallel for collapse(2) schedule(static) num_threads(team) reduction(+ : saturated) if (team > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    for (int32_t h = 0; h < heads; ++h) {
      const int64_t end = std::min(n, (c + 1) * kChunk);
      const float k_inv = 1.0f / k_scales_[std::size_t(h)], v_inv = 1.0f / v_scales_[std::size_t(h)];
      for (int64_t t = c * kChunk; t < end;) {
        const int64_t slot = slots[t];
        if (slot < 0) {
          ++t;
          continue;
        }
        const int64_t blk = slot / bs;
        const int32_t off = int32_t(slot % bs);
        int32_t len = 1;
        while (t + len < end && off + len < bs && slots[t + len] == slot + len) ++len;
        const kv::RowSource ks{static_cast<const char*>(k.data) + (t * k.strides[0] + h * k.strides[1]) * int64_t(kes),
                               k.strides[0] * int64_t(kes), k.dtype};
        saturated += store_run(pv, ks, blk, off, len, h, false, hs, k_inv, stream);
        if (!mla) {
          const kv::RowSource vs{static_cast<const char*>(v.data) + (t * v.strides[0] + h * v.strides[1]) * int64_t(ves),
                                 v.strides[0] * int64_t(ves), v.dtype};
          saturated += store_run(pv, vs, blk, off, len, h, true, hv, v_inv, stream);
        }
        t += len;
      }
    }
  }
  saturated_ += saturated;
}

void KVCache::copy_block(int32_t src, int32_t dst) {
  require(src >= 0 && src < spec_.num_blocks, "src_block", src, "a block id in [0, " + std::to_string(spec_.num_blocks) + ")");
  require(dst >= 0 && dst < spec_.num_blocks, "dst_block", dst, "a block id in [0, " + std::to_string(spec_.num_blocks) + ")");
  const PagedKV pv = view();
  if (src == dst) return;
  if (spec_.token_scales()) {  // the block's slots keep their scales
    const std::size_t n = std::size_t(spec_.block_size) * std::size_t(spec_.num_kv_heads);
    for (float* s : {k_token_scales_, v_token_scales_})
      std::memmove(s + std::size_t(dst) * n, s + std::size_t(src) * n, n * sizeof(float));
  }
  if (strided()) {  // rows at the engine's strides: only the addressed elements move
    const std::size_t es = dtype_size(spec_.dtype);
    char* b = static_cast<char*>(pv.base);
    for (bool is_v : {false, true})
      for (int32_t h = 0; h < spec_.num_kv_heads; ++h)
        for (int32_t t = 0; t < spec_.block_size; ++t)
          std::memmove(b + kv_element_offset(pv, dst, t, h, 0, is_v) * int64_t(es), b + kv_element_offset(pv, src, t, h, 0, is_v) * int64_t(es),
                       std::size_t(spec_.stored_width(is_v)) * es);
    return;
  }
  const std::size_t bytes = std::size_t(pv.block_stride) * dtype_size(spec_.dtype);
  char* base = static_cast<char*>(data());
  if (device_) {
    device_.allocator()->copy(base + std::size_t(dst) * bytes, base + std::size_t(src) * bytes, bytes, CopyKind::device_to_device);
  } else {
    std::memmove(base + std::size_t(dst) * bytes, base + std::size_t(src) * bytes, bytes);
  }
}

void KVCache::fill(float value) {
  if (spec_.token_scales()) {  // every code 1 and every scale `value`: each element reads `value`
    // (int4: each stored, rotated value, zero point 0; a NaN poison reads NaN everywhere).
    const int64_t per = int64_t(spec_.num_blocks) * spec_.block_size * spec_.num_kv_heads;
    const float stored = spec_.int4() ? int4_head::scale_of(value) : value;
    std::fill(k_token_scales_, k_token_scales_ + per, stored);
    std::fill(v_token_scales_, v_token_scales_ + per, stored);
    if (spec_.int4()) {  // every nibble 1, in any layout
      if (!strided()) {
        std::memset(data(), 0x11, bytes());
        return;
      }
      const PagedKV pv = view();
      for (bool is_v : {false, true})
        for (int32_t b = 0; b < spec_.num_blocks; ++b)
          for (int32_t h = 0; h < spec_.num_kv_heads; ++h)
            for (int32_t t = 0; t < spec_.block_size; ++t)
              std::memset(static_cast<char*>(pv.base) + kv_element_offset(pv, b, t, h, 0, is_v), 0x11, std::size_t(spec_.stored_width(is_v)));
      return;
    }
    value = 1.0f;
  }
  if (spec_.turboquant()) {  // every slot as write_kv stores a vector of `value`: a NaN poison reads NaN
    const PagedKV pv = view();
    const int32_t d = spec_.head_size;
    std::vector<float> x(static_cast<std::size_t>(d), value);
    std::vector<uint8_t> slot(static_cast<std::size_t>(entry_width(spec_)), 0);
    turboquant::quantize_key(x.data(), d, pv.tq, slot.data(), nullptr);
    turboquant::quantize_value(x.data(), d, pv.tq, slot.data() + pv.v_offset, nullptr);
    for (int64_t i = 0; i < int64_t(bytes()); i += int64_t(slot.size())) std::memcpy(static_cast<char*>(data()) + i, slot.data(), slot.size());
    return;
  }
  if (spec_.nvfp4()) {  // every code 1.0 and every block scale e4m3(value): a NaN poison reads NaN
    const PagedKV pv = view();
    for (bool is_v : {false, true}) {
      const int32_t w = is_v ? spec_.v_width() : spec_.head_size;
      uint8_t row[nvfp4::row_bytes(limits::kMaxHeadSize)];
      std::memset(row, 0x22, std::size_t(w / 2));
      std::memset(row + w / 2, f32_to_fp8_e4m3(value), std::size_t(w / nvfp4::kGroup));
      for (int32_t b = 0; b < spec_.num_blocks; ++b)
        for (int32_t h = 0; h < spec_.num_kv_heads; ++h)
          for (int32_t t = 0; t < spec_.block_size; ++t)
            std::memcpy(static_cast<char*>(pv.base) + kv_element_offset(pv, b, t, h, 0, is_v), row, std::size_t(nvfp4::row_bytes(w)));
    }
    return;
  }
  if (strided()) {  // only the elements the cache addresses: the memory between may be the engine's
    const PagedKV pv = view();
    for (bool is_v : {false, true})
      for (int32_t b = 0; b < spec_.num_blocks; ++b)
        for (int32_t h = 0; h < spec_.num_kv_heads; ++h)
          for (int32_t t = 0; t < spec_.block_size; ++t)
            for (int32_t d = 0, n = is_v ? spec_.v_width() : spec_.head_size; d < n; ++d)
              store_from_float(pv.base, spec_.dtype, kv_element_offset(pv, b, t, h, d, is_v), value);
    return;
  }
  Buffer host = device_ ? Buffer(spec_.dtype, spec_.shape()) : Buffer();
  void* dst = device_ ? host.data() : data();
  const int64_t n = int64_t(bytes() / dtype_size(spec_.dtype));
  if (is_ds_mla(spec_)) {
    // Every entry holds `value` (latent with scale 1, rope in bf16), so a NaN poison stays NaN.
    uint8_t entry[ds_mla::kEntryBytes];
    const float one = 1.0f;
    const uint16_t rope = f32_to_bf16(value);
    std::memset(entry, f32_to_fp8_e4m3(value), ds_mla::kRank);
    for (int t = 0; t < ds_mla::kTiles; ++t) std::memcpy(entry + ds_mla::kScalesOffset + 4 * t, &one, 4);
    for (int i = 0; i < ds_mla::kRope; ++i) std::memcpy(entry + ds_mla::kRopeOffset + 2 * i, &rope, 2);
    for (int64_t i = 0; i < n; i += ds_mla::kEntryBytes) std::memcpy(static_cast<uint8_t*>(dst) + i, entry, sizeof entry);
  } else {
    for (int64_t i = 0; i < n; ++i) store_from_float(dst, spec_.dtype, i, value);
  }
  if (device_) device_.allocator()->copy(data(), host.data(), bytes(), CopyKind::host_to_device);
}

}  // namespace attn
