// Conversions from Python values to the core's vocabulary (dtypes, platforms, arrays).
#include <string>

#include "bind.hpp"

namespace attn::py {
namespace {

// ml_dtypes / NumPy spell some dtypes differently from attn.
std::string normalize_dtype_name(std::string name) {
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  if (name == "float8_e4m3fn") return "fp8_e4m3";
  if (name == "float8_e5m2") return "fp8_e5m2";
  return name;
}

// A type of an already-imported module (nullptr if the module is not loaded): attn imports neither
// NumPy nor torch for the caller. Looked up once per process; the reference is kept for good.
PyTypeObject* loaded_type(const char* module, const char* name) {
  PyObject* mod = PyImport_GetModule(nb::str(module).ptr());
  if (!mod) {
    PyErr_Clear();
    return nullptr;
  }
  PyObject* type = PyObject_GetAttrString(mod, name);
  Py_DECREF(mod);
  if (!type || !PyType_Check(type)) {
    PyErr_Clear();
    Py_XDECREF(type);
    return nullptr;
  }
  return reinterpret_cast<PyTypeObject*>(type);
}

bool is_numpy_array(nb::handle h) {
  static PyTypeObject* ndarray = nullptr;
  if (!ndarray) ndarray = loaded_type("numpy", "ndarray");
  return ndarray && PyObject_TypeCheck(h.ptr(), ndarray);
}

// A plain torch.Tensor's DLPack capsule from torch._C._to_dlpack (well under a microsecond),
// skipping Tensor.__dlpack__'s Python-level checks (about 6 us per array, the larger part of a
// decode call's overhead). Subclasses and tensors that need gradients take the general path,
// whose errors stay as they are. An invalid object when obj is not such a tensor.
nb::object torch_capsule(nb::handle obj) {
  static PyTypeObject* tensor = nullptr;
  static PyObject* to_dlpack = nullptr;
  if (!tensor) {
    tensor = loaded_type("torch", "Tensor");
    if (!tensor) return {};
    PyObject* torch_c = PyImport_GetModule(nb::str("torch._C").ptr());
    if (torch_c) to_dlpack = PyObject_GetAttrString(torch_c, "_to_dlpack");
    Py_XDECREF(torch_c);
    if (!to_dlpack) PyErr_Clear();
  }
  if (!to_dlpack || Py_TYPE(obj.ptr()) != tensor) return {};
  PyObject* grad = PyObject_GetAttrString(obj.ptr(), "requires_grad");
  const bool needs_grad = grad != Py_False;
  Py_XDECREF(grad);
  if (!grad) PyErr_Clear();
  if (needs_grad) return {};
  PyObject* capsule = PyObject_CallOneArg(to_dlpack, obj.ptr());
  if (!capsule) PyErr_Clear();  // the general path reports what is wrong with the tensor
  return nb::steal(capsule);
}

}  // namespace

std::string text_of(nb::handle h) {
  nb::object s = nb::steal(PyObject_Str(h.ptr()));
  if (!s.is_valid()) throw nb::python_error();
  return nb::cast<std::string>(s);
}

std::string str_from_py(nb::handle h, const char* arg) {
  if (!nb::isinstance<nb::str>(h))
    throw nb::type_error((std::string(arg) + "=" + text_of(nb::repr(h)) + " invalid: expected a str or None").c_str());
  return nb::cast<std::string>(h);
}

nb::object json_loads(const std::string& text) { return nb::module_::import_("json").attr("loads")(text); }

DType dtype_from_py(nb::handle h) {
  if (nb::isinstance<nb::str>(h)) return parse_dtype(normalize_dtype_name(nb::cast<std::string>(h)));
  std::string text = text_of(h);
  if (text.rfind("torch.", 0) == 0) return parse_dtype(normalize_dtype_name(text));
  // NumPy dtypes, NumPy scalar types (np.float16) and ml_dtypes types (ml_dtypes.bfloat16).
  nb::object np = nb::module_::import_("numpy");
  nb::object dt;
  try {
    dt = np.attr("dtype")(h);
  } catch (nb::python_error&) {
    throw nb::type_error(("dtype=" + text + " invalid: expected a dtype name (float32, float16, bfloat16), "
                          "a NumPy / ml_dtypes dtype or a torch dtype").c_str());
  }
  return parse_dtype(normalize_dtype_name(nb::cast<std::string>(dt.attr("name"))));
}

KVCacheDType kv_cache_dtype_from_py(nb::handle h) {
  if (h.is_none()) return KVCacheDType::auto_;
  if (nb::isinstance<nb::str>(h)) return parse_kv_cache_dtype(nb::cast<std::string>(h));
  // A dtype object (torch.float8_e4m3fn, ml_dtypes.float8_e5m2, np.float16): its attn name.
  return parse_kv_cache_dtype(to_string(dtype_from_py(h)));
}

KVLayout kv_layout_from_name(const std::string& layout) { return parse_kv_layout(layout); }

Platform platform_from_py(nb::handle h) {
  if (h.is_none()) return detect_cpu();
  if (nb::isinstance<Platform>(h)) return nb::cast<Platform>(h);
  if (nb::isinstance<nb::str>(h)) return parse_platform(nb::cast<std::string>(h));
  throw nb::type_error(("platform=" + nb::cast<std::string>(nb::repr(h)) +
                        " invalid: expected None, an attn.Platform or a spec such as 'cpu', 'cpu:avx2', 'cuda:9.0'")
                           .c_str());
}

std::string describe_dtype(nb::handle array) {
  if (nb::hasattr(array, "dtype")) return text_of(nb::object(array.attr("dtype")));
  return text_of(nb::object(array.type().attr("__name__")));
}

ArrayArg array_arg(nb::handle obj, const char* arg, bool writable) {
  // Messages are built only on failure: this runs for every array of every kernel call.
  if (obj.is_none()) throw nb::type_error((std::string(arg) + "=None invalid: expected an array").c_str());
  ArrayArg out;
  out.source = nb::borrow(obj);
  // NumPy cannot export ml_dtypes.bfloat16 through DLPack or the buffer protocol; a uint16 view
  // of the same memory can be, and the dtype is remembered here.
  bool reinterpreted_bf16 = false;
  nb::object capsule = torch_capsule(obj);
  if (!capsule.is_valid() && is_numpy_array(obj)) {
    const std::string dt = nb::cast<std::string>(obj.attr("dtype").attr("name"));
    if (dt == "bfloat16") {
      out.source = obj.attr("view")(nb::module_::import_("numpy").attr("uint16"));
      reinterpreted_bf16 = true;
    }
  }
  // The capsule's deleter keeps the tensor alive as long as `out.array` is.
  nb::handle importable = capsule.is_valid() ? nb::handle(capsule) : nb::handle(out.source);
  bool ok;
  if (writable) {
    nb::ndarray<> w;
    ok = nb::try_cast(importable, w, /*convert=*/false);
    if (ok) out.array = nb::ndarray<nb::ro>(w.handle());
  } else {
    ok = nb::try_cast(importable, out.array, /*convert=*/false);
  }
  if (!ok) {
    const std::string type = text_of(nb::object(obj.type().attr("__name__")));
    throw nb::type_error((std::string(arg) + "=<" + type + ", dtype " + describe_dtype(obj) + "> invalid: expected a " +
                          (writable ? "writable " : "") + "NumPy array or DLPack tensor of float32, float16 or bfloat16")
                             .c_str());
  }
  const nb::ndarray<nb::ro>& a = out.array;
  TensorView& v = out.view;
  const auto dt = a.dtype();
  const bool is_float = dt.code == uint8_t(nb::dlpack::dtype_code::Float) && dt.lanes == 1;
  if (reinterpreted_bf16 || (dt.code == uint8_t(nb::dlpack::dtype_code::Bfloat) && dt.bits == 16 && dt.lanes == 1)) {
    v.dtype = DType::bfloat16;
  } else if (is_float && dt.bits == 32) {
    v.dtype = DType::float32;
  } else if (is_float && dt.bits == 16) {
    v.dtype = DType::float16;
  } else {
    throw nb::type_error((std::string(arg) + ".dtype=" + describe_dtype(obj) +
                          " invalid: expected float32, float16 or bfloat16 (ml_dtypes.bfloat16 / torch.bfloat16)")
                             .c_str());
  }
  const int device = a.device_type();
  if (device == nb::device::cpu::value) {
    v.device = DeviceKind::cpu;
  } else if (device == nb::device::cuda::value) {
    v.device = DeviceKind::cuda;
  } else {
    throw nb::value_error((std::string(arg) + ": arrays on DLPack device type " + std::to_string(device) +
                           " invalid: expected a CPU (or CUDA) array").c_str());
  }
  ATTN_REQUIRE(a.ndim() <= std::size_t(TensorView::kMaxDims), std::string(arg) + ".ndim", a.ndim(),
               "at most " + std::to_string(TensorView::kMaxDims));
  v.data = const_cast<void*>(a.data());
  v.ndim = int(a.ndim());
  for (int d = 0; d < v.ndim; ++d) {
    v.shape[d] = a.shape(d);
    v.strides[d] = a.stride(d);
  }
  auto strides_text = [&] {
    std::string s = "(";
    for (int d = 0; d < v.ndim; ++d) s += (d ? ", " : "") + std::to_string(v.strides[d]);
    return s + (v.ndim == 1 ? ",)" : ")");
  };
  for (int d = 0; d < v.ndim; ++d) {
    // Kernels index rows with element strides; a strided last dimension or a reversed axis
    // would need a copy, which this API never makes behind the caller's back.
    if (v.shape[d] > 1 && v.strides[d] < 0)
      throw nb::value_error((std::string(arg) + ".strides=" + strides_text() +
                             " (in elements) invalid: expected non-negative strides; "
                             "pass a copy such as numpy.ascontiguousarray(" + arg + ")").c_str());
  }
  if (v.ndim > 0 && v.shape[v.ndim - 1] > 1 && v.strides[v.ndim - 1] != 1)
    throw nb::value_error((std::string(arg) + ".strides=" + strides_text() +
                           " (in elements) invalid: expected a contiguous last dimension "
                           "(stride 1); pass a copy such as numpy.ascontiguousarray(" + arg + ")").c_str());
  if (v.ndim > 0 && v.shape[v.ndim - 1] == 1) v.strides[v.ndim - 1] = 1;  // any stride is fine for one element
  return out;
}

}  // namespace attn::py
