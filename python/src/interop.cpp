// What engines and PyTorch users hand attn besides plain NumPy arrays: integer metadata as
// tensors, q / out flattened to [tokens, heads * head_size], scales, and caches exported through
// DLPack in their storage dtype (bfloat16 and fp8 included, which NumPy cannot carry). Caches
// over engine tensors (from_dlpack, from_views): cache_interop.cpp.
#include <cmath>
#include <string>

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
    case DType::int8: return code(dtype_code::Int, 8);
    default: break;
  }
  throw Error("cache dtype " + std::string(to_string(d)) + " has no DLPack spelling");
}

/// uint8: the bytes of an int4_per_token_head cache (two codes each) or an nvfp4 one (codes and
/// block scales), as vLLM allocates them.
nb::dlpack::dtype dlpack_uint8() { return nb::dlpack::dtype{uint8_t(nb::dlpack::dtype_code::UInt), 8, 1}; }

}  // namespace

nb::object cache_ndarray(nb::handle self) {
  const KVCache& c = nb::cast<const KVCache&>(self);
  check_storage(c);
  require(!c.strided(), "cache", "strided (KVCache.from_views)", "a cache with attn's own layout: read the engine's tensors instead");
  std::vector<std::size_t> shape;
  for (int64_t d : c.spec().shape()) shape.push_back(std::size_t(d));
  const nb::dlpack::dtype dt = c.spec().int4() || c.spec().nvfp4() || c.spec().turboquant() ? dlpack_uint8() : dlpack_dtype(c.spec().dtype);
  return nb::cast(nb::ndarray<nb::array_api>(c.data(), shape.size(), shape.data(), self, nullptr, dt, nb::device::cpu::value));
}

DType cache_storage_dtype(nb::handle tensor, nb::object& exported, bool* packed) {
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
  for (DType d : {DType::float32, DType::float16, DType::bfloat16, DType::fp8_e4m3, DType::fp8_e5m2, DType::int8})
    if (a.dtype() == dlpack_dtype(d)) return d;
  if (packed && a.dtype() == dlpack_uint8()) {
    *packed = true;
    return DType::int8;
  }
  throw nb::type_error(("tensor.dtype=" + describe_dtype(tensor) +
                        " invalid: expected a cache dtype (float32, float16, bfloat16, float8_e4m3fn, float8_e5m2, int8, "
                        "uint8 for int4 codes)").c_str());
}

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
  ATTN_REQUIRE(heads > 0 && v.shape[1] % heads == 0, std::string(arg) + ".shape[1]", v.shape[1],
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

void warn_if_saturated(const KVCache& cache, int64_t saturated_before) {
  const int64_t n = cache.saturated_values() - saturated_before;
  if (n == 0) return;
  if (cache.spec().token_scales() || cache.spec().turboquant()) {
    const std::string msg = std::to_string(n) + " NaN or infinite values were written to this " +
                            std::string(to_string(cache.spec().kv_cache_dtype)) +
                            " cache: each (token, KV head) vector holding one reads as NaN (its scale is NaN)" +
                            (cache.spec().kv_cache_dtype == KVCacheDType::turboquant_k8v4
                                 ? std::string(" or, in an fp8 key, is clamped to +-448 (as are finite keys beyond it)")
                                 : std::string());
    if (PyErr_WarnEx(PyExc_RuntimeWarning, msg.c_str(), 1) < 0) throw nb::python_error();
    return;
  }
  if (cache.spec().nvfp4()) {  // non-finite values and values beyond a saturated block scale, counted together
    const std::string msg = std::to_string(n) + " NaN / infinite values, or values beyond 6 x 448 x the global scale, were written "
                            "to this " + std::string(to_string(cache.spec().kv_cache_dtype)) +
                            " cache: a block of 16 holding a NaN or an infinity reads NaN, larger values are clamped "
                            "(set larger scales with cache.set_scales(k_scale, v_scale))";
    if (PyErr_WarnEx(PyExc_RuntimeWarning, msg.c_str(), 1) < 0) throw nb::python_error();
    return;
  }
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

}  // namespace attn::py
