// Caches over engine tensors: KVCache.from_dlpack (one tensor in attn's layout) and from_views
// (K and V views at the engine's strides), which keep the tensors alive and check on every use
// that the wrapped memory is still theirs; and the bindings of both, with the DLPack export.
#include <limits>
#include <string>
#include <unordered_map>

#include "attn/checked.hpp"
#include "attn/limits.hpp"
#include "bind.hpp"

namespace attn::py {
namespace {

std::string shape_text(const nb::ndarray<>& a) {
  std::string shape = "(";
  for (std::size_t d = 0; d < a.ndim(); ++d) shape += (d ? ", " : "") + std::to_string(a.shape(d));
  return shape + ")";
}

/// One tensor a cache reads: what the caller passed and the DLPack export it was wrapped from.
/// The export pins the storage the tensor had then (torch's set_ can move the tensor to other
/// storage); every use re-imports the tensor to check it still shows that memory (resize_ frees
/// it in place, which no reference can prevent).
struct PinnedTensor {
  nb::object source;     // what the caller passed (or the raw-bytes view of a NumPy ml_dtypes array)
  nb::ndarray<> pinned;  // its DLPack export at wrap time: holds that storage alive
  std::string shape;
  // torch: the storage's address and size at wrap time. A view keeps its own shape when its base
  // is resized, so only the storage shows that the memory under it is gone.
  std::string storage = storage_of(source);

  static std::string storage_of(const nb::object& t) {
    if (!nb::hasattr(t, "untyped_storage")) return {};
    nb::object st = t.attr("untyped_storage")();
    return std::to_string(nb::cast<uintptr_t>(st.attr("data_ptr")())) + "+" + std::to_string(nb::cast<std::size_t>(st.attr("nbytes")()));
  }

  void check(const char* arg) const {
    if (!storage.empty() && storage_of(source) != storage)
      throw Error(std::string(arg) + " storage invalid: expected the storage it was wrapped with (" + storage +
                  " bytes), now " + storage_of(source) + ": resize_ / set_ replaced it (on the tensor or its base); wrap the tensor again");
    nb::ndarray<> now;
    if (!nb::try_cast(source, now, false))
      throw Error(std::string(arg) + " can no longer be exported through DLPack: expected the tensor it wrapped, unchanged");
    const std::string s = shape_text(now);
    require(now.data() == pinned.data() && s == shape, arg, "data " + std::to_string(uintptr_t(now.data())) + " shape " + s,
            "the memory it was wrapped with (data " + std::to_string(uintptr_t(pinned.data())) + " shape " + shape +
                "): resize_ / set_ replaced it; wrap the tensor again");
  }
};

/// An engine's tensors wrapped as a cache (from_dlpack: one tensor in attn's layout; from_views:
/// K and V views at the engine's strides), kept alive and re-checked on every use.
class ExternalKVCache : public KVCache {
 public:
  ExternalKVCache(const KVCacheSpec& spec, PinnedTensor t, const char* arg)
      : KVCache(spec, t.pinned.data()), tensors_{std::move(t)}, arg_(arg) {
    wrapped().emplace(this, this);
  }
  ExternalKVCache(const KVCacheSpec& spec, const StridedKV& memory, std::vector<PinnedTensor> t, const char* arg)
      : KVCache(spec, memory), tensors_(std::move(t)), arg_(arg) {
    wrapped().emplace(this, this);
  }
  ~ExternalKVCache() { wrapped().erase(this); }
  ExternalKVCache(const ExternalKVCache&) = delete;
  ExternalKVCache& operator=(const ExternalKVCache&) = delete;

  void check() const {
    for (const PinnedTensor& t : tensors_) t.check(arg_);
  }
  /// One more tensor the cache reads (a per-token-head cache's scale arrays), kept and re-checked.
  void keep(PinnedTensor t) { tensors_.push_back(std::move(t)); }
  /// The external caches alive, by address; read and written with the GIL held.
  static std::unordered_map<const KVCache*, const ExternalKVCache*>& wrapped() {
    static std::unordered_map<const KVCache*, const ExternalKVCache*> m;
    return m;
  }

 private:
  std::vector<PinnedTensor> tensors_;
  const char* arg_;
};

/// The storage dtype, export and CPU check every wrapped tensor goes through.
PinnedTensor pin_cpu_tensor(nb::handle tensor, DType& dtype, bool* packed = nullptr) {
  nb::object exported;
  dtype = cache_storage_dtype(tensor, exported, packed);
  nb::ndarray<> a;
  if (!nb::try_cast(exported, a, false))
    throw nb::type_error("tensor invalid: expected a writable DLPack tensor or NumPy array");
  require(a.device_type() == nb::device::cpu::value, "tensor.device", a.device_type() == nb::device::cuda::value ? "cuda" : "other",
          "cpu (attn's KV cache kernels read host memory)");
  std::string shape = shape_text(a);
  for (std::size_t d = 0; d < a.ndim(); ++d)  // the spec holds int32 sizes: a larger extent would wrap
    require(a.shape(d) <= std::numeric_limits<int32_t>::max(), "tensor.shape", shape, "extents below 2^31");
  return PinnedTensor{exported, std::move(a), std::move(shape)};
}

/// The elements of `a` after checking it is row-major contiguous (unit extents take any stride):
/// the cache addresses engine tensors with row-major strides, so a permuted or sliced view would be
/// misread. `arg` names the tensor in the message.
int64_t contiguous_elements(const nb::ndarray<>& a, const std::string& arg) {
  int64_t expected = 1;
  for (std::size_t d = a.ndim(); d-- > 0;) {
    require(a.shape(d) == 1 || a.stride(d) == expected, arg + ".strides", "dimension " + std::to_string(d) + " stride " +
            std::to_string(a.stride(d)), std::to_string(expected) + " (a contiguous tensor; pass tensor.contiguous())");
    expected *= int64_t(a.shape(d));
  }
  return expected;
}

/// The kv_cache_dtype of an engine's cache tensor: fp8 codes with per-token-head scales given are
/// fp8_per_token_head, int8 codes always int8_per_token_head and uint8 (`packed`) always
/// int4_per_token_head (they need the scales).
KVCacheDType kv_cache_dtype_of(DType d, bool token_scales, bool packed = false) {
  if (packed) return KVCacheDType::int4_per_token_head;
  if (d == DType::int8) return KVCacheDType::int8_per_token_head;
  if (token_scales) {
    require(d == DType::fp8_e4m3, "tensor.dtype", to_string(d), "int8 or float8_e4m3fn for a cache with k_scales / v_scales");
    return KVCacheDType::fp8_per_token_head;
  }
  return d == DType::fp8_e4m3 ? KVCacheDType::fp8_e4m3 : d == DType::fp8_e5m2 ? KVCacheDType::fp8_e5m2 : KVCacheDType::auto_;
}

/// A per-token-head cache's engine-owned scale arrays (vLLM's k_scale_cache / v_scale_cache):
/// float32 [num_blocks, block_size, num_kv_heads], contiguous, on the CPU; read and written in
/// place, kept alive and re-checked with the cache.
void use_engine_token_scales(ExternalKVCache& cache, nb::handle k_scales, nb::handle v_scales) {
  const KVCacheSpec& s = cache.spec();
  if (k_scales.is_none() && v_scales.is_none()) {
    require(!s.token_scales(), "k_scales", "None",
            "the engine's float32 [num_blocks, block_size, num_kv_heads] K and V scale tensors for a " +
                std::string(to_string(s.kv_cache_dtype)) + " cache");
    return;
  }
  const std::string want = "(" + std::to_string(s.num_blocks) + ", " + std::to_string(s.block_size) + ", " + std::to_string(s.num_kv_heads) + ")";
  float* ptr[2] = {nullptr, nullptr};
  int i = 0;
  for (nb::handle h : {k_scales, v_scales}) {
    const char* arg = i == 0 ? "k_scales" : "v_scales";
    require(!h.is_none(), arg, "None", "a float32 scale tensor beside the other one");
    DType d;
    PinnedTensor t = pin_cpu_tensor(h, d);
    require(d == DType::float32, std::string(arg) + ".dtype", to_string(d), "float32");
    require(t.shape == want, std::string(arg) + ".shape", t.shape, want + " = [num_blocks, block_size, num_kv_heads]");
    contiguous_elements(t.pinned, arg);
    ptr[i++] = static_cast<float*>(t.pinned.data());
    cache.keep(std::move(t));
  }
  cache.use_token_scales(ptr[0], ptr[1]);
}

/// K and V views [num_blocks, block_size, num_kv_heads, head_size(_v)] at any strides (each row
/// contiguous, K and V at the same strides), e.g. halves of vLLM's [K | V] rows or dense
/// [batch, seq, heads, dim] tensors: a cache that reads and writes them in place.
nb::object cache_from_views(nb::handle k, nb::handle v, bool per_head_scales, nb::handle k_scales, nb::handle v_scales) {
  DType kd, vd;
  bool kp4 = false, vp4 = false;
  PinnedTensor kt = pin_cpu_tensor(k, kd, &kp4), vt = pin_cpu_tensor(v, vd, &vp4);
  require(vp4 == kp4, "v.dtype", vp4 ? "uint8" : std::string(to_string(vd)), "k's dtype " + (kp4 ? "uint8" : std::string(to_string(kd))));
  const nb::ndarray<>&ka = kt.pinned, &va = vt.pinned;
  require(vd == kd, "v.dtype", to_string(vd), "k's dtype " + std::string(to_string(kd)));
  const char* dims = "[num_blocks, block_size, num_kv_heads, head_size]";
  require(ka.ndim() == 4, "k.shape", kt.shape, dims);
  require(va.ndim() == 4 && va.shape(0) == ka.shape(0) && va.shape(1) == ka.shape(1) && va.shape(2) == ka.shape(2), "v.shape",
          vt.shape, "k's first three extents " + kt.shape + " and its own head_size_v");
  // The spec's head_size_v 0 means "= head_size": a V of no width would be read and written
  // head_size wide from where the empty view points, memory neither view addresses.
  require(va.shape(3) >= 1, "v.shape", vt.shape, "a last dimension (head_size_v) of at least 1");
  for (int d = 0; d < 3; ++d)
    require(ka.stride(d) == va.stride(d) || ka.shape(d) == 1, "v.strides", "dimension " + std::to_string(d) + " stride " +
            std::to_string(va.stride(d)), "k's stride " + std::to_string(ka.stride(d)) + " (K and V at the same strides)");
  require(ka.stride(3) == 1 || ka.shape(3) == 1, "k.strides", "last dimension stride " + std::to_string(ka.stride(3)), "1 (contiguous rows)");
  require(va.stride(3) == 1 || va.shape(3) == 1, "v.strides", "last dimension stride " + std::to_string(va.stride(3)), "1 (contiguous rows)");
  for (int d = 0; d < 3; ++d)
    require(ka.stride(d) >= 0, "k.strides", "dimension " + std::to_string(d) + " stride " + std::to_string(ka.stride(d)), ">= 0");
  KVCacheSpec spec;
  spec.dtype = kd;
  spec.kv_cache_dtype = kv_cache_dtype_of(kd, !k_scales.is_none() || !v_scales.is_none(), kp4);
  spec.per_head_scales = per_head_scales;
  spec.num_blocks = int32_t(ka.shape(0)), spec.block_size = int32_t(ka.shape(1)), spec.num_kv_heads = int32_t(ka.shape(2));
  const int32_t per_byte = kp4 ? 2 : 1;  // int4: two codes per byte of the row
  spec.head_size = int32_t(ka.shape(3)) * per_byte, spec.head_size_v = int32_t(va.shape(3)) * per_byte;
  // Unit extents have any stride; give them the stride that keeps the order below meaningful.
  const int64_t token = ka.shape(1) == 1 ? 0 : ka.stride(1), head = ka.shape(2) == 1 ? 0 : ka.stride(2);
  spec.layout = head >= token ? KVLayout::HND : KVLayout::NHD;  // names the token order only
  const int64_t es = int64_t(dtype_size(kd));
  StridedKV m;
  m.k = ka.data();
  m.block = ka.shape(0) == 1 ? 0 : ka.stride(0), m.token = token, m.head = head;
  const auto kp = reinterpret_cast<std::intptr_t>(ka.data()), vp = reinterpret_cast<std::intptr_t>(va.data());
  require((vp - kp) % es == 0, "v.data_ptr", vp - kp, "a whole number of elements from k's");
  m.v_offset = (vp - kp) / es;
  // Each view addresses only its own tensor's elements; the memory spans both.
  // Overflow-checked: a producer may claim strides whose products wrap 64 bits.
  auto end_of = [&](const nb::ndarray<>& a, const char* name) {
    int64_t last = 0;
    for (std::size_t d = 0; d < 4; ++d) {
      require(a.shape(d) >= 1, std::string(name) + ".shape", std::to_string(a.shape(d)) + " in dimension " + std::to_string(d),
              "extents >= 1");
      const int64_t step = checked_product(std::string(name) + " extent", {int64_t(a.shape(d)) - 1, int64_t(a.stride(d))});
      last = checked_sum(std::string(name) + " extent", {last, step});
    }
    return reinterpret_cast<std::intptr_t>(a.data()) + checked_product(std::string(name) + " bytes", {last + 1, es});
  };
  const std::intptr_t lo = std::min(kp, vp), hi = std::max(end_of(ka, "k"), end_of(va, "v"));
  m.memory = reinterpret_cast<const void*>(lo);
  m.bytes = std::size_t(hi - lo);
  std::vector<PinnedTensor> pinned;
  pinned.push_back(std::move(kt));
  pinned.push_back(std::move(vt));
  auto* cache = new ExternalKVCache(spec, m, std::move(pinned), "KVCache.from_views tensor");
  nb::object out = nb::cast(cache, nb::rv_policy::take_ownership);
  use_engine_token_scales(*cache, k_scales, v_scales);
  return out;
}

nb::object cache_from_dlpack(nb::handle tensor, const std::string& layout, int32_t head_size_v, bool per_head_scales,
                             nb::handle k_scales, nb::handle v_scales, const std::string& kv_cache_dtype) {
  DType dtype;
  bool packed = false;
  PinnedTensor t = pin_cpu_tensor(tensor, dtype, &packed);
  const nb::ndarray<>& a = t.pinned;
  KVCacheSpec spec;
  spec.dtype = dtype;
  spec.kv_cache_dtype = kv_cache_dtype_of(dtype, !k_scales.is_none() || !v_scales.is_none(), packed);
  // uint8 bytes are int4_per_token_head codes unless the caller names nvfp4 (rows of codes and
  // block scales) or a turboquant preset (slots of K then V).
  const KVCacheDType named = kv_cache_dtype.empty() ? spec.kv_cache_dtype : parse_kv_cache_dtype(kv_cache_dtype);
  const bool nvfp4 = is_nvfp4(named), tq = is_turboquant(named);
  if (!kv_cache_dtype.empty()) {
    require(nvfp4 || tq ? packed : named == spec.kv_cache_dtype, "kv_cache_dtype", kv_cache_dtype,
            nvfp4 || tq ? "a uint8 tensor for a " + kv_cache_dtype + " cache (got " + describe_dtype(tensor) + ")"
                        : "the tensor's own (" + std::string(to_string(spec.kv_cache_dtype)) +
                              "), or nvfp4 / nvfp4_4over6 / turboquant_* for a uint8 tensor");
    spec.kv_cache_dtype = named;
  }
  spec.per_head_scales = per_head_scales;
  const std::size_t want_ndim = layout == "MLA" ? 3 : tq ? 4 : 5;
  const std::string& shape = t.shape;
  spec.layout = kv_layout_from_name(layout);
  if (tq) {  // vLLM's slots: [num_blocks, num_kv_heads, block_size, slot] (HND) or [num_blocks, block_size, num_kv_heads, slot]
    const bool nhd = spec.layout == KVLayout::NHD;
    require(a.ndim() == want_ndim, "tensor.shape", shape,
            nhd ? "[num_blocks, block_size, num_kv_heads, slot_bytes] for layout='NHD'"
                : "[num_blocks, num_kv_heads, block_size, slot_bytes] for layout='" + layout + "'");
    spec.block_size = int32_t(a.shape(nhd ? 1 : 2));
    spec.num_kv_heads = int32_t(a.shape(nhd ? 2 : 1));
  } else if (spec.layout == KVLayout::MLA) {
    require(a.ndim() == want_ndim, "tensor.shape", shape, "[num_blocks, block_size, kv_lora_rank + rope] for layout='MLA'");
    spec.block_size = int32_t(a.shape(1));
    spec.num_kv_heads = 1;
  } else {  // HND_PAIRS declares HND's extents (the pair order is inside each run)
    const bool nhd = spec.layout == KVLayout::NHD;
    require(a.ndim() == want_ndim && a.shape(1) == 2, "tensor.shape", shape,
            nhd ? "[num_blocks, 2, block_size, num_kv_heads, head_size] for layout='NHD'"
                : "[num_blocks, 2, num_kv_heads, block_size, head_size] for layout='" + layout + "'");
    spec.block_size = int32_t(a.shape(nhd ? 2 : 3));
    spec.num_kv_heads = int32_t(a.shape(nhd ? 3 : 2));
  }
  spec.num_blocks = int32_t(a.shape(0));
  const int64_t last = int64_t(a.shape(a.ndim() - 1));
  if (tq) {  // the largest head size whose slot is this wide (odd neighbours round to the same bytes)
    const turboquant::Format f = turboquant::format_of(named);
    int32_t d = limits::kMaxHeadSize;
    while (d > 1 && turboquant::slot_bytes(f, d) > last) --d;
    require(turboquant::slot_bytes(f, d) == last, "tensor.shape", shape,
            "a last dimension that is the slot size of a head size for " + kv_cache_dtype + " (" + std::to_string(turboquant::slot_bytes(f, 128)) +
                " bytes for head_size 128)");
    spec.head_size = d;
  } else if (nvfp4) {  // n / 2 code bytes and n / 16 block scales: 9 bytes per 16 values
    require(last % 9 == 0, "tensor.shape", shape, "a last dimension of head_size / 2 + head_size / 16 bytes (a multiple of 9) for nvfp4");
    spec.head_size = int32_t(last / 9 * 16);
  } else {
    spec.head_size = int32_t(last) * (packed ? 2 : 1);  // int4: two codes per byte
  }
  spec.head_size_v = head_size_v;
  // The last dimension holds the wider of K and V: a V wider than it would be written past the tensor.
  require(head_size_v >= 0 && head_size_v <= spec.head_size, "head_size_v", head_size_v,
          "0 (= head_size) or at most the tensor's last dimension " + std::to_string(spec.head_size));
  // Whatever the spec derives, it must address exactly the tensor's bytes, never past them.
  const int64_t tensor_bytes = contiguous_elements(a, "tensor") * int64_t(dtype_size(dtype));
  require(spec.bytes() == tensor_bytes, "tensor.nbytes", tensor_bytes,
          std::to_string(spec.bytes()) + " bytes, what the cache " + spec.to_string() + " addresses");
  auto* cache = new ExternalKVCache(spec, std::move(t), "KVCache.from_dlpack tensor");
  nb::object out = nb::cast(cache, nb::rv_policy::take_ownership);
  use_engine_token_scales(*cache, k_scales, v_scales);
  return out;
}

}  // namespace

void check_storage(const KVCache& cache) {
  if (cache.owns_storage()) return;
  const auto& wrapped = ExternalKVCache::wrapped();
  if (auto it = wrapped.find(&cache); it != wrapped.end()) it->second->check();
}

void bind_cache_interop(nb::class_<KVCache>& cls) {
  nb::class_<ExternalKVCache, KVCache>(cls, "_External", "A KVCache over an engine's tensor (KVCache.from_dlpack).");
  cls.def_static("from_dlpack", &cache_from_dlpack, nb::arg("tensor"), nb::kw_only(), nb::arg("layout") = "NHD",
                 nb::arg("head_size_v") = 0, nb::arg("per_head_scales") = false, nb::arg("k_scales") = nb::none(),
                 nb::arg("v_scales") = nb::none(), nb::arg("kv_cache_dtype") = "",
                 "Wraps an engine-owned tensor as a cache, without copying: the shape gives num_blocks, block_size,\n"
                 "num_kv_heads and head_size for `layout`, the dtype the storage dtype (fp8 tensors make fp8 caches).\n"
                 "Per-token-head caches (vLLM's int8_per_token_head / fp8_per_token_head / int4_per_token_head): an\n"
                 "int8, float8_e4m3fn or uint8 (two int4 codes per byte, the last dimension head_size / 2) tensor with\n"
                 "k_scales and v_scales, the engine's float32 [num_blocks, block_size, num_kv_heads] scale tensors\n"
                 "(int4: zero points in their low mantissa bits), read and written in place like the codes.\n"
                 "nvfp4 / nvfp4_4over6 (kv_cache_dtype=): a uint8 tensor whose rows are head_size / 2 bytes of e2m1\n"
                 "codes then head_size / 16 e4m3 block scales (attn's row; vLLM keeps codes and scales in two regions of\n"
                 "each page); the global scales are the cache's set_scales.\n"
                 "It must be contiguous, on the CPU and 64-byte aligned; the tensor and its storage stay alive with the\n"
                 "cache, and every use checks the tensor still has that storage (resize_ / set_ on it is an error).");
  cls.def_static("from_views", &cache_from_views, nb::arg("k"), nb::arg("v"), nb::kw_only(), nb::arg("per_head_scales") = false,
                 nb::arg("k_scales") = nb::none(), nb::arg("v_scales") = nb::none(),
                 "A cache over K and V views an engine laid out itself, read and written in place: k and v are\n"
                 "[num_blocks, block_size, num_kv_heads, head_size(_v)] at any strides (rows contiguous, K and V at\n"
                 "the same strides), on the CPU, e.g. the two halves of vLLM's per-token [K | V] rows, or dense\n"
                 "[batch, seq, heads, dim] K / V as one block per sequence. Kept alive and re-checked like from_dlpack.\n"
                 "A strided cache has no dense shape: numpy() / __dlpack__ refuse it (use the tensors themselves).");
  cls.def(
      "token_scales",
      [](nb::handle self) -> nb::object {
        const KVCache& c = nb::cast<const KVCache&>(self);
        check_storage(c);
        if (!c.spec().token_scales()) return nb::none();
        const KVCacheSpec& s = c.spec();
        const std::size_t shape[3] = {std::size_t(s.num_blocks), std::size_t(s.block_size), std::size_t(s.num_kv_heads)};
        auto view = [&](float* p) { return nb::cast(nb::ndarray<nb::numpy, float>(p, 3, shape, self)); };
        return nb::make_tuple(view(c.k_token_scales()), view(c.v_token_scales()));
      },
      "Per-token-head caches: (k_scales, v_scales), NumPy views (no copy) of the float32 [num_blocks, block_size,\n"
      "num_kv_heads] scale arrays (vLLM's k_scale_cache / v_scale_cache layout); an element reads code * scale of its\n"
      "(block, slot, KV head). None for other caches.");
  cls.def_prop_ro("strided", &KVCache::strided, "True for caches made by from_views (the engine's strides).");
  cls.def_prop_ro("owns_storage", &KVCache::owns_storage, "False for caches made by from_dlpack.");
  cls.def(
         "__dlpack__",
         [](nb::handle self, nb::kwargs kwargs) { return cache_ndarray(self).attr("__dlpack__")(**kwargs); },
         "DLPack export of the storage (no copy), in the storage dtype: torch.from_dlpack(cache) gives\n"
         "torch.bfloat16 / torch.float8_e4m3fn / ... tensors shaped like cache.shape.")
      .def("__dlpack_device__", [](nb::handle self) { return cache_ndarray(self).attr("__dlpack_device__")(); });
}

}  // namespace attn::py
