// What engines and PyTorch users hand attn besides plain NumPy arrays: integer metadata as
// tensors, q / out flattened to [tokens, heads * head_size], and caches exported through DLPack
// in their storage dtype (bfloat16 and fp8 included, which NumPy cannot carry).
#include <cmath>
#include <limits>
#include <string>
#include <unordered_map>

#include "bind.hpp"

namespace attn::py {
namespace {

/// NumPy arrays and torch tensors become Python lists (ints) so one caster serves every source.
nb::object as_python_list(nb::handle h) {
  if (nb::hasattr(h, "tolist") && !nb::isinstance<nb::list>(h)) return h.attr("tolist")();
  return nb::borrow(h);
}

nb::dlpack::dtype dlpack_dtype(DType d) {
  using nb::dlpack::dtype_code;
  auto code = [](dtype_code c, uint8_t bits) { return nb::dlpack::dtype{uint8_t(c), bits, 1}; };
  switch (d) {
    case DType::float32: return code(dtype_code::Float, 32);
    case DType::float16: return code(dtype_code::Float, 16);
    case DType::bfloat16: return code(dtype_code::Bfloat, 16);
    case DType::fp8_e4m3: return code(dtype_code::Float8_E4M3FN, 8);
    case DType::fp8_e5m2: return code(dtype_code::Float8_E5M2, 8);
    default: break;
  }
  throw Error("cache dtype " + std::string(to_string(d)) + " has no DLPack spelling");
}

/// The cache storage as a DLPack-capable array object (no copy); it keeps the cache alive.
nb::object cache_ndarray(nb::handle self) {
  const KVCache& c = nb::cast<const KVCache&>(self);
  check_storage(c);
  std::vector<std::size_t> shape;
  for (int64_t d : c.spec().shape()) shape.push_back(std::size_t(d));
  return nb::cast(nb::ndarray<nb::array_api>(c.data(), shape.size(), shape.data(), self, nullptr, dlpack_dtype(c.spec().dtype),
                                nb::device::cpu::value));
}

/// The storage dtype of an engine's cache tensor: DLPack float / bfloat16 / fp8 codes, or a NumPy
/// array whose ml_dtypes dtype NumPy cannot export (viewed as raw bytes of the same memory).
DType cache_storage_dtype(nb::handle tensor, nb::object& exported) {
  exported = nb::borrow(tensor);
  if (nb::hasattr(tensor, "dtype") && nb::cast<std::string>(tensor.type().attr("__module__")) == "numpy") {
    const std::string name = nb::cast<std::string>(tensor.attr("dtype").attr("name"));
    const DType d = name == "bfloat16" ? DType::bfloat16 : name == "float8_e4m3fn" ? DType::fp8_e4m3
                    : name == "float8_e5m2" ? DType::fp8_e5m2 : DType::float32;
    if (d != DType::float32) {
      exported = tensor.attr("view")(nb::module_::import_("numpy").attr(d == DType::bfloat16 ? "uint16" : "uint8"));
      return d;
    }
  }
  nb::ndarray<> a;
  if (!nb::try_cast(tensor, a, false))
    throw nb::type_error(("tensor=<" + text_of(nb::object(tensor.type().attr("__name__"))) +
                          "> invalid: expected a DLPack tensor (torch) or NumPy array").c_str());
  for (DType d : {DType::float32, DType::float16, DType::bfloat16, DType::fp8_e4m3, DType::fp8_e5m2})
    if (a.dtype() == dlpack_dtype(d)) return d;
  throw nb::type_error(("tensor.dtype=" + describe_dtype(tensor) +
                        " invalid: expected a cache dtype (float32, float16, bfloat16, float8_e4m3fn, float8_e5m2)").c_str());
}

std::string shape_text(const nb::ndarray<>& a) {
  std::string shape = "(";
  for (std::size_t d = 0; d < a.ndim(); ++d) shape += (d ? ", " : "") + std::to_string(a.shape(d));
  return shape + ")";
}

/// An engine tensor wrapped as a cache. The wrapper keeps the tensor and the DLPack export it was
/// wrapped from: the export pins the storage the tensor had then (torch's set_ can move the tensor
/// to other storage), and every use re-imports the tensor to check it still shows that memory
/// (resize_ frees it in place, which no reference can prevent).
class ExternalKVCache : public KVCache {
 public:
  ExternalKVCache(const KVCacheSpec& spec, nb::object source, nb::ndarray<> pinned)
      : KVCache(spec, pinned.data()), source_(std::move(source)), pinned_(std::move(pinned)), shape_(shape_text(pinned_)) {
    wrapped().emplace(this, this);
  }
  ~ExternalKVCache() { wrapped().erase(this); }
  ExternalKVCache(const ExternalKVCache&) = delete;
  ExternalKVCache& operator=(const ExternalKVCache&) = delete;

  void check() const {
    nb::ndarray<> now;
    if (!nb::try_cast(source_, now, false))
      throw Error("KVCache.from_dlpack tensor can no longer be exported through DLPack: expected the tensor it wrapped, "
                  "unchanged");
    const std::string shape = shape_text(now);
    require(now.data() == data() && shape == shape_, "KVCache.from_dlpack tensor",
            "data " + std::to_string(uintptr_t(now.data())) + " shape " + shape,
            "the memory it was wrapped with (data " + std::to_string(uintptr_t(data())) + " shape " + shape_ +
                "): resize_ / set_ replaced it; wrap the tensor again");
  }
  /// The external caches alive, by address; read and written with the GIL held.
  static std::unordered_map<const KVCache*, const ExternalKVCache*>& wrapped() {
    static std::unordered_map<const KVCache*, const ExternalKVCache*> m;
    return m;
  }

 private:
  nb::object source_;     // what the caller passed (or the raw-bytes view of a NumPy ml_dtypes array)
  nb::ndarray<> pinned_;  // its DLPack export at wrap time: holds that storage alive
  std::string shape_;
};

nb::object cache_from_dlpack(nb::handle tensor, const std::string& layout, int32_t head_size_v, bool per_head_scales) {
  nb::object exported;
  const DType dtype = cache_storage_dtype(tensor, exported);
  nb::ndarray<> a;
  if (!nb::try_cast(exported, a, false))
    throw nb::type_error("tensor invalid: expected a writable DLPack tensor or NumPy array");
  require(a.device_type() == nb::device::cpu::value, "tensor.device", a.device_type() == nb::device::cuda::value ? "cuda" : "other",
          "cpu (attn's KV cache kernels read host memory)");
  KVCacheSpec spec;
  spec.dtype = dtype;
  spec.kv_cache_dtype = dtype == DType::fp8_e4m3 ? KVCacheDType::fp8_e4m3
                        : dtype == DType::fp8_e5m2 ? KVCacheDType::fp8_e5m2 : KVCacheDType::auto_;
  spec.per_head_scales = per_head_scales;
  const std::size_t want_ndim = layout == "MLA" ? 3 : 5;
  const std::string shape = shape_text(a);
  for (std::size_t d = 0; d < a.ndim(); ++d)  // the spec holds int32 sizes: a larger extent would wrap
    require(a.shape(d) <= std::numeric_limits<int32_t>::max(), "tensor.shape", shape, "extents below 2^31");
  spec.layout = kv_layout_from_name(layout);
  if (spec.layout == KVLayout::MLA) {
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
  spec.head_size = int32_t(a.shape(a.ndim() - 1));
  spec.head_size_v = head_size_v;
  // The last dimension holds the wider of K and V: a V wider than it would be written past the tensor.
  require(head_size_v >= 0 && head_size_v <= spec.head_size, "head_size_v", head_size_v,
          "0 (= head_size) or at most the tensor's last dimension " + std::to_string(spec.head_size));
  // The cache is addressed with row-major strides: a permuted or sliced view would be misread.
  int64_t expected = 1;
  for (std::size_t d = a.ndim(); d-- > 0;) {
    require(a.shape(d) == 1 || a.stride(d) == expected, "tensor.strides", "dimension " + std::to_string(d) + " stride " +
            std::to_string(a.stride(d)), std::to_string(expected) + " (a contiguous tensor; pass tensor.contiguous())");
    expected *= a.shape(d);
  }
  // Whatever the spec derives, it must address exactly the tensor's bytes, never past them.
  const int64_t tensor_bytes = expected * int64_t(dtype_size(dtype));
  require(spec.bytes() == tensor_bytes, "tensor.nbytes", tensor_bytes,
          std::to_string(spec.bytes()) + " bytes, what the cache " + spec.to_string() + " addresses");
  return nb::cast(new ExternalKVCache(spec, exported, std::move(a)), nb::rv_policy::take_ownership);
}

}  // namespace

template <typename T>
std::vector<T> ints_from_py(nb::handle h, const char* arg) {
  std::vector<T> out;
  if (!nb::try_cast(as_python_list(h), out))
    throw nb::type_error((std::string(arg) + "=" + text_of(nb::repr(h)) +
                          " invalid: expected a sequence of ints (list, NumPy or torch integer array)").c_str());
  return out;
}
template std::vector<int64_t> ints_from_py<int64_t>(nb::handle, const char*);

std::vector<std::vector<int32_t>> int_rows_from_py(nb::handle h, const char* arg) {
  std::vector<std::vector<int32_t>> out;
  if (!nb::try_cast(as_python_list(h), out))
    throw nb::type_error((std::string(arg) + "=" + text_of(nb::repr(h)) +
                          " invalid: expected one sequence of ints per sequence (lists, or a 2-D NumPy / torch "
                          "integer array whose rows may be padded past the blocks a sequence needs)").c_str());
  return out;
}

void unflatten_heads(ArrayArg& a, int64_t heads, const char* arg) {
  TensorView& v = a.view;
  if (v.ndim != 2) return;
  require(heads > 0 && v.shape[1] % heads == 0, std::string(arg) + ".shape[1]", v.shape[1],
          "a multiple of " + std::to_string(heads) + " heads ([tokens, heads * head_size])");
  const int64_t width = v.shape[1] / heads;
  v.ndim = 3;
  v.shape = {v.shape[0], heads, width};
  v.strides = {v.strides[0], width, 1};
}

float scale_from_py(nb::handle scale) {
  if (scale.is_none()) return 0.0f;
  float value = 0.0f;
  if (!nb::try_cast(scale, value))
    throw nb::type_error(("scale=" + text_of(nb::repr(scale)) + " invalid: expected a float or None").c_str());
  require(std::isfinite(value) && value > 0.0f, "scale", text_of(nb::repr(scale)),
          "a finite value > 0, or None for 1/sqrt(head_size)");
  return value;
}

void check_storage(const KVCache& cache) {
  if (cache.owns_storage()) return;
  const auto& wrapped = ExternalKVCache::wrapped();
  if (auto it = wrapped.find(&cache); it != wrapped.end()) it->second->check();
}

void warn_if_saturated(const KVCache& cache, int64_t saturated_before) {
  const int64_t n = cache.saturated_values() - saturated_before;
  if (n == 0) return;
  const auto& k = cache.k_scales();
  const auto& v = cache.v_scales();
  const std::string msg = std::to_string(n) + " values written to this " + std::string(to_string(cache.spec().dtype)) +
                          " cache lay beyond its range (value / scale beyond +-" +
                          (cache.spec().dtype == DType::fp8_e4m3 ? "448" : "57344") +
                          ") and were clamped; k_scales[0]=" + std::to_string(k.empty() ? 1.0f : k[0]) +
                          ", v_scales[0]=" + std::to_string(v.empty() ? 1.0f : v[0]) +
                          ": set larger scales with cache.set_scales(k_scale, v_scale)";
  if (PyErr_WarnEx(PyExc_RuntimeWarning, msg.c_str(), 1) < 0) throw nb::python_error();
}

void bind_cache_interop(nb::class_<KVCache>& cls) {
  nb::class_<ExternalKVCache, KVCache>(cls, "_External", "A KVCache over an engine's tensor (KVCache.from_dlpack).");
  cls.def_static("from_dlpack", &cache_from_dlpack, nb::arg("tensor"), nb::kw_only(), nb::arg("layout") = "NHD",
                 nb::arg("head_size_v") = 0, nb::arg("per_head_scales") = false,
                 "Wraps an engine-owned tensor as a cache, without copying: the shape gives num_blocks, block_size,\n"
                 "num_kv_heads and head_size for `layout`, the dtype the storage dtype (fp8 tensors make fp8 caches).\n"
                 "It must be contiguous, on the CPU and 64-byte aligned; the tensor and its storage stay alive with the\n"
                 "cache, and every use checks the tensor still has that storage (resize_ / set_ on it is an error).");
  cls.def_prop_ro("owns_storage", &KVCache::owns_storage, "False for caches made by from_dlpack.");
  cls.def(
         "__dlpack__",
         [](nb::handle self, nb::kwargs kwargs) { return cache_ndarray(self).attr("__dlpack__")(**kwargs); },
         "DLPack export of the storage (no copy), in the storage dtype: torch.from_dlpack(cache) gives\n"
         "torch.bfloat16 / torch.float8_e4m3fn / ... tensors shaped like cache.shape.")
      .def("__dlpack_device__", [](nb::handle self) { return cache_ndarray(self).attr("__dlpack_device__")(); });
}

}  // namespace attn::py
