#pragma once
// Shared declarations of the attn._core extension: one bind_* function per area, and the
// conversions from Python values (dtype names, NumPy / torch dtypes, platforms, arrays).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "attn/attn.hpp"

namespace nb = nanobind;

namespace attn::py {

void bind_errors(nb::module_& m);
void bind_config(nb::module_& m);
void bind_select(nb::module_& m);
void bind_layer(nb::module_& m);
void bind_parallel(nb::module_& m);
void bind_tune(nb::module_& m);

/// A dtype given as a name ("bf16"), a NumPy / ml_dtypes dtype or scalar type, or a torch dtype.
DType dtype_from_py(nb::handle h);
/// None → auto; else a vLLM cache-dtype name.
KVCacheDType kv_cache_dtype_from_py(nb::handle h);
/// A cache layout name: NHD, HND, HND_PAIRS or MLA (attn::Error otherwise).
KVLayout kv_layout_from_name(const std::string& layout);
/// None → this machine's CPU; else a Platform or a spec such as "cpu:avx2" / "cuda:9.0".
Platform platform_from_py(nb::handle h);
/// The Python spelling of a dtype for error messages: str(x.dtype) when it has one, else type name.
std::string describe_dtype(nb::handle array);
/// str(h) (PyObject_Str), for messages.
std::string text_of(nb::handle h);
/// `h` as a str; anything else is a TypeError naming `arg` (nb::cast would raise std::bad_cast).
std::string str_from_py(nb::handle h, const char* arg);
/// `json.loads(text)`: how every to_dict() is built from the core's JSON rendering.
nb::object json_loads(const std::string& text);

/// An array argument of a kernel call, seen without copying. Holds the Python objects it was made
/// from so the memory stays alive while the kernel runs (with the GIL released).
struct ArrayArg {
  nb::object source;           // what the caller passed (or a reinterpreting view of it)
  nb::ndarray<nb::ro> array;   // the imported DLPack / buffer view of `source`
  TensorView view;
};
/// Accepts anything nanobind imports through DLPack or the buffer protocol (NumPy, PyTorch, ...),
/// plus NumPy arrays of ml_dtypes.bfloat16 (reinterpreted as uint16, same memory).
/// Kernel dtypes only: float32, float16, bfloat16 (TypeError otherwise). Throws ValueError for
/// a strided last dimension, negative strides, or more than TensorView::kMaxDims dimensions.
ArrayArg array_arg(nb::handle obj, const char* arg, bool writable);

/// Integer arguments given as lists, NumPy arrays or torch tensors (TypeError naming `arg`).
template <typename T>
std::vector<T> ints_from_py(nb::handle h, const char* arg);
/// One int list per sequence: nested lists or a 2-D integer array (rows may be padded).
std::vector<std::vector<int32_t>> int_rows_from_py(nb::handle h, const char* arg);
/// A 2-D [tokens, heads * width] array seen as [tokens, heads, width] (same memory); other ranks
/// are left as they are for the kernels' own checks.
void unflatten_heads(ArrayArg& a, int64_t heads, const char* arg);
/// scale=None → 0 (the core's "1/sqrt(head_size)"); an explicit value must be finite and > 0, so
/// scale=0.0 is an error rather than a silent default.
float scale_from_py(nb::handle scale);
/// A RuntimeWarning when the last write clamped fp8 values (KVCache::saturated_values grew);
/// warnings.simplefilter("error", RuntimeWarning) makes it an exception.
void warn_if_saturated(const KVCache& cache, int64_t saturated_before);
/// The cache storage as a DLPack-capable array object (no copy); it keeps the cache alive.
nb::object cache_ndarray(nb::handle self);
/// The storage dtype of an engine's cache tensor: DLPack float / bfloat16 / fp8 codes, or a NumPy
/// array whose ml_dtypes dtype NumPy cannot export (viewed as raw bytes of the same memory).
/// `packed` (when given) is set for uint8 tensors, the packed codes of int4_per_token_head caches
/// (stored as int8 bytes).
DType cache_storage_dtype(nb::handle tensor, nb::object& exported, bool* packed = nullptr);
/// A cache made by KVCache.from_dlpack: attn::Error unless its tensor still has the memory it was
/// wrapped with. Every binding that reads or writes a cache's memory calls it first (GIL held).
void check_storage(const KVCache& cache);
/// KVCache.from_dlpack (an engine-owned tensor), owns_storage, __dlpack__ / __dlpack_device__.
void bind_cache_interop(nb::class_<KVCache>& cls);

}  // namespace attn::py
