// attn.KVCache, attn.BatchMetadata and attn.Attention (one layer served by one backend): its
// construction (selection, MLA up-projections), caches and write_kv; plan / run / forward are in step.cpp.
#include <algorithm>
#include <memory>
#include <string>

#include "layer.hpp"

namespace attn::py {
namespace {

std::vector<float> floats_from_py(nb::handle h, const char* arg) {
  std::vector<float> out;
  if (h.is_none()) return out;
  try {
    for (nb::handle x : h) out.push_back(nb::cast<float>(nb::float_(x)));
  } catch (nb::python_error&) {
    throw nb::type_error((std::string(arg) + "=" + nb::cast<std::string>(nb::repr(h)) +
                          " invalid: expected a sequence of floats").c_str());
  }
  return out;
}

/// An MLA up-projection (W_UK or W_UV) given as an array [num_heads, kv_lora_rank, width], any
/// float dtype NumPy can convert, as the row-major float32 LayerParams holds.
std::vector<float> up_projection_from_py(nb::handle h, const char* arg, const LayerConfig& c, int width) {
  if (h.is_none()) return {};
  nb::object np = nb::module_::import_("numpy");
  nb::object arr = np.attr("ascontiguousarray")(np.attr("asarray")(h), np.attr("float32"));
  nb::ndarray<nb::ro> a;
  if (!nb::try_cast(arr, a, /*convert=*/false))
    throw nb::type_error((std::string(arg) + "=<" + describe_dtype(h) + "> invalid: expected a float array").c_str());
  std::vector<int64_t> got;
  for (std::size_t d = 0; d < a.ndim(); ++d) got.push_back(int64_t(a.shape(d)));
  const std::vector<int64_t> want{c.num_heads, c.kv_lora_rank, width};
  // A config without the width cannot use the weights: the core says so (LayerParams checks).
  if (width > 0)
    require(got == want, std::string(arg) + ".shape", text_of(arr.attr("shape")),
            "(num_heads, kv_lora_rank, " + std::string(arg[2] == 'k' ? "qk_nope_head_dim" : "v_head_dim") + ") = (" +
                std::to_string(want[0]) + ", " + std::to_string(want[1]) + ", " + std::to_string(want[2]) + ")");
  const auto* f = static_cast<const float*>(a.data());  // C-contiguous float32, alive while copied
  return std::vector<float>(f, f + a.size());
}

nb::tuple to_tuple(const std::vector<int64_t>& v) {
  nb::list l;
  for (int64_t x : v) l.append(x);
  return nb::steal<nb::tuple>(PyList_AsTuple(l.ptr()));
}

template <typename T>
nb::object numpy_copy(const std::vector<T>& v, std::vector<std::size_t> shape) {
  // The metadata vectors are small and the object owns them: hand out read-only copies.
  auto* copy = new std::vector<T>(v);
  nb::capsule owner(copy, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  auto arr = nb::ndarray<nb::numpy, T>(copy->data(), shape.size(), shape.data(), owner);
  nb::object o = nb::cast(arr);
  o.attr("flags").attr("writeable") = false;
  return o;
}

KVCacheSpec cache_spec_from_py(int32_t num_blocks, int32_t block_size, int32_t num_kv_heads, int32_t head_size,
                               int32_t head_size_v, nb::handle dtype, nb::handle kv_cache_dtype, const std::string& layout,
                               bool per_head_scales) {
  KVCacheSpec s;
  s.num_blocks = num_blocks, s.block_size = block_size, s.num_kv_heads = num_kv_heads;
  s.head_size = head_size, s.head_size_v = head_size_v, s.per_head_scales = per_head_scales;
  s.kv_cache_dtype = kv_cache_dtype_from_py(kv_cache_dtype);
  // dtype is the storage dtype; left out, it follows kv_cache_dtype (auto → bfloat16, fp8 → fp8_e4m3).
  s.dtype = dtype.is_none() ? kv_storage_dtype(s.kv_cache_dtype, DType::bfloat16) : dtype_from_py(dtype);
  s.layout = kv_layout_from_name(layout);
  return s;
}

/// An engine's own slot mapping (where it believes each new token goes) must be the one the block
/// table gives: a disagreement would attend slots that were never written.
void check_engine_slots(const BatchMetadata& md, const std::vector<int64_t>& given) {
  require(given.size() == md.slot_mapping.size(), "len(slot_mapping)", given.size(),
          "num_tokens = " + std::to_string(md.slot_mapping.size()) + " (the sum of query_lens)");
  for (std::size_t t = 0; t < given.size(); ++t) {
    if (given[t] == md.slot_mapping[t]) continue;
    const auto seq = std::upper_bound(md.query_start_loc.begin(), md.query_start_loc.end(), int64_t(t)) - md.query_start_loc.begin() - 1;
    fail_check("slot_mapping[" + std::to_string(t) + "]", given[t],
               std::to_string(md.slot_mapping[t]) + ", the slot block_ids give new token " +
                   std::to_string(int64_t(t) - md.query_start_loc[std::size_t(seq)]) + " of sequence " + std::to_string(seq));
  }
}

/// A NumPy view of the cache storage (no copy), shaped as the spec declares, in the storage dtype
/// (ml_dtypes for bfloat16 / fp8). It keeps the cache alive.
nb::object cache_array(nb::handle self) {
  const KVCache& c = nb::cast<const KVCache&>(self);
  check_storage(c);
  require(!c.strided(), "cache", "strided (KVCache.from_views)", "a cache with attn's own layout: read the engine's tensors instead");
  const KVCacheSpec& s = c.spec();
  std::vector<std::size_t> shape;
  for (int64_t d : s.shape()) shape.push_back(std::size_t(d));
  const std::size_t es = dtype_size(s.dtype);
  nb::dlpack::dtype raw = es == 4 ? nb::dtype<float>() : es == 2 ? nb::dtype<uint16_t>() : nb::dtype<uint8_t>();
  nb::object arr = nb::cast(nb::ndarray<nb::numpy>(c.data(), shape.size(), shape.data(), self, nullptr, raw));
  const char* ml = nullptr;
  switch (s.dtype) {
    case DType::float16: return arr.attr("view")(nb::module_::import_("numpy").attr("float16"));
    case DType::int8: return arr.attr("view")(nb::module_::import_("numpy").attr("int8"));
    case DType::bfloat16: ml = "bfloat16"; break;
    case DType::fp8_e4m3: ml = "float8_e4m3fn"; break;
    case DType::fp8_e5m2: ml = "float8_e5m2"; break;
    default: return arr;
  }
  return arr.attr("view")(nb::module_::import_("ml_dtypes").attr(ml));
}

}  // namespace

nb::object new_output_like(nb::handle q, const std::vector<int64_t>& shape, DType dtype) {
  nb::tuple dims = to_tuple(shape);
  if (nb::hasattr(q, "new_empty")) return q.attr("new_empty")(dims);  // torch: same dtype and device
  nb::object np = nb::module_::import_("numpy");
  if (nb::hasattr(q, "dtype") && nb::cast<std::string>(q.type().attr("__module__")) == "numpy")
    return np.attr("empty")(dims, q.attr("dtype"));
  nb::object dt = dtype == DType::bfloat16 ? nb::module_::import_("ml_dtypes").attr("bfloat16")
                                           : nb::object(nb::str(std::string(to_string(dtype)).c_str()));
  return np.attr("empty")(dims, dt);
}

void require_dtype(const ArrayArg& a, const char* arg, DType want) {
  if (a.view.dtype != want)
    throw nb::type_error((std::string(arg) + ".dtype=" + std::string(to_string(a.view.dtype)) +
                          " invalid: expected the layer dtype " + std::string(to_string(want))).c_str());
}

void require_device(const Attention& a, const ArrayArg& x, const char* arg) {
  const DeviceKind want = a.device();
  if (x.view.device != want)
    throw nb::value_error((std::string(arg) + ".device=" + std::string(to_string(x.view.device)) +
                           " invalid: expected " + std::string(to_string(want)) + " (backend " +
                           a.decision().backend + " runs there)").c_str());
}

void bind_layer(nb::module_& m) {
  // Tests prove zero-copy with this: the address the kernels would read equals the caller's.
  m.def("_data_address", [](nb::handle a, bool writable) { return uintptr_t(array_arg(a, "array", writable).view.data); },
        nb::arg("array"), nb::arg("writable") = false);
  nb::class_<KVCache> cache_cls(m, "KVCache",
                                "The paged KV cache of one layer: storage owned by attn (64-byte aligned), or an\n"
                                "engine's tensor wrapped by KVCache.from_dlpack.");
  bind_cache_interop(cache_cls);
  cache_cls.def("__init__",
           [](KVCache* self, int32_t num_blocks, int32_t block_size, int32_t num_kv_heads, int32_t head_size,
              int32_t head_size_v, nb::handle dtype, nb::handle kv_cache_dtype, const std::string& layout,
              bool per_head_scales) {
             new (self) KVCache(cache_spec_from_py(num_blocks, block_size, num_kv_heads, head_size, head_size_v, dtype,
                                                   kv_cache_dtype, layout, per_head_scales));
           },
           nb::arg("num_blocks"), nb::kw_only(), nb::arg("block_size") = 16, nb::arg("num_kv_heads") = 8,
           nb::arg("head_size") = 128, nb::arg("head_size_v") = 0, nb::arg("dtype") = nb::none(),
           nb::arg("kv_cache_dtype") = nb::none(), nb::arg("layout") = "NHD", nb::arg("per_head_scales") = false)
      .def_prop_ro("num_blocks", [](const KVCache& c) { return c.spec().num_blocks; })
      .def_prop_ro("block_size", [](const KVCache& c) { return c.spec().block_size; })
      .def_prop_ro("num_kv_heads", [](const KVCache& c) { return c.spec().num_kv_heads; })
      .def_prop_ro("head_size", [](const KVCache& c) { return c.spec().head_size; })
      .def_prop_ro("head_size_v", [](const KVCache& c) { return c.spec().v_width(); })
      .def_prop_ro("dtype", [](const KVCache& c) { return std::string(to_string(c.spec().dtype)); })
      .def_prop_ro("kv_cache_dtype", [](const KVCache& c) { return std::string(to_string(c.spec().kv_cache_dtype)); })
      .def_prop_ro("layout", [](const KVCache& c) { return std::string(to_string(c.spec().layout)); })
      .def_prop_ro("per_head_scales", [](const KVCache& c) { return c.spec().per_head_scales; })
      .def_prop_ro("shape", [](const KVCache& c) { return to_tuple(c.spec().shape()); })
      .def_prop_ro("nbytes", &KVCache::bytes)
      .def_prop_ro("k_scales", &KVCache::k_scales)
      .def_prop_ro("v_scales", &KVCache::v_scales)
      .def(
          "set_scales",
          [](KVCache& c, nb::handle k, nb::handle v) {
            auto as_list = [](nb::handle h, const char* arg) {
              if (nb::isinstance<nb::float_>(h) || nb::isinstance<nb::int_>(h)) return std::vector<float>{nb::cast<float>(h)};
              return floats_from_py(h, arg);
            };
            c.set_scales(as_list(k, "k_scales"), as_list(v, "v_scales"));
          },
          nb::arg("k_scales"), nb::arg("v_scales"),
          "Quantization scales (dequantized = stored * scale): one float per tensor, or one per KV head.")
      .def("fill", [](KVCache& c, float value) { check_storage(c); c.fill(value); }, nb::arg("value"),
           "Fills every element (tests: NaN poison in unused slots).")
      .def("copy_block", [](KVCache& c, int32_t src, int32_t dst) { check_storage(c); c.copy_block(src, dst); },
           nb::arg("src"), nb::arg("dst"))
      .def("numpy", &cache_array, "A NumPy view of the storage (no copy), in the storage dtype.")
      .def("__repr__", [](const KVCache& c) { return "KVCache(" + c.spec().to_string() + ")"; });

  nb::class_<BatchMetadata>(m, "BatchMetadata",
                            "One engine step's batch: where each sequence's new tokens are and which cache blocks\n"
                            "hold it. Built once per step, read by every layer.")
      .def("__init__",
           [](BatchMetadata* self, nb::handle query_lens_arg, nb::handle block_ids_arg, nb::handle context_lens_arg,
              nb::handle seq_lens_arg, const KVCache* cache, int32_t block_size, int32_t num_blocks, bool causal,
              nb::handle slot_mapping_arg) {
             // Lists, NumPy arrays and torch integer tensors alike.
             const auto query_lens = ints_from_py<int64_t>(query_lens_arg, "query_lens");
             const auto block_ids = int_rows_from_py(block_ids_arg, "block_ids");
             std::optional<std::vector<int64_t>> context_lens, seq_lens;
             if (!context_lens_arg.is_none()) context_lens = ints_from_py<int64_t>(context_lens_arg, "context_lens");
             if (!seq_lens_arg.is_none()) seq_lens = ints_from_py<int64_t>(seq_lens_arg, "seq_lens");
             const std::size_t n = query_lens.size();
             if (context_lens.has_value() == seq_lens.has_value())
               throw Error("BatchMetadata: give exactly one of context_lens (tokens already cached) or seq_lens "
                           "(context + new tokens)");
             const auto& lens = context_lens ? *context_lens : *seq_lens;
             require(lens.size() == n, context_lens ? "len(context_lens)" : "len(seq_lens)", lens.size(),
                     "len(query_lens) = " + std::to_string(n));
             require(block_ids.size() == n, "len(block_ids)", block_ids.size(), "len(query_lens) = " + std::to_string(n));
             if (cache) {
               require(block_size == 0 || block_size == cache->spec().block_size, "block_size", block_size,
                       "0 or the cache's block_size " + std::to_string(cache->spec().block_size));
               require(num_blocks == 0 || num_blocks == cache->spec().num_blocks, "num_blocks", num_blocks,
                       "0 or the cache's num_blocks " + std::to_string(cache->spec().num_blocks));
               block_size = cache->spec().block_size, num_blocks = cache->spec().num_blocks;
             }
             require(block_size > 0 && num_blocks > 0, "block_size / num_blocks", std::to_string(block_size) + " / " +
                     std::to_string(num_blocks), "positive values, or cache=<the KVCache>");
             std::vector<SequenceSpec> seqs(n);
             for (std::size_t s = 0; s < n; ++s) {
               seqs[s].query_len = query_lens[s];
               if (!context_lens) {
                 // Checked before subtracting: seq_lens - query_lens of hostile values wraps.
                 const std::string at = "[" + std::to_string(s) + "]";
                 require(query_lens[s] >= 0, "query_lens" + at, query_lens[s], ">= 0");
                 require(lens[s] >= query_lens[s], "seq_lens" + at, lens[s],
                         ">= query_lens" + at + " = " + std::to_string(query_lens[s]));
               }
               seqs[s].context_len = context_lens ? lens[s] : lens[s] - query_lens[s];
               seqs[s].block_ids = block_ids[s];
             }
             BatchMetadata md = BatchMetadata::build(seqs, block_size, num_blocks, causal);
             if (!slot_mapping_arg.is_none()) check_engine_slots(md, ints_from_py<int64_t>(slot_mapping_arg, "slot_mapping"));
             new (self) BatchMetadata(std::move(md));
           },
           nb::kw_only(), nb::arg("query_lens"), nb::arg("block_ids"), nb::arg("context_lens") = nb::none(),
           nb::arg("seq_lens") = nb::none(), nb::arg("cache") = nb::none(), nb::arg("block_size") = 0,
           nb::arg("num_blocks") = 0, nb::arg("causal") = true, nb::arg("slot_mapping") = nb::none())
      .def_ro("num_seqs", &BatchMetadata::num_seqs)
      .def_ro("num_tokens", &BatchMetadata::num_tokens)
      .def_ro("block_size", &BatchMetadata::block_size)
      .def_ro("max_blocks_per_seq", &BatchMetadata::max_blocks_per_seq)
      .def_ro("max_query_len", &BatchMetadata::max_query_len)
      .def_ro("max_seq_len", &BatchMetadata::max_seq_len)
      .def_ro("causal", &BatchMetadata::causal)
      .def_prop_ro("query_start_loc", [](const BatchMetadata& md) { return numpy_copy(md.query_start_loc, {md.query_start_loc.size()}); })
      .def_prop_ro("seq_lens", [](const BatchMetadata& md) { return numpy_copy(md.seq_lens, {md.seq_lens.size()}); })
      .def_prop_ro("block_table", [](const BatchMetadata& md) {
        return numpy_copy(md.block_table, {std::size_t(md.num_seqs), std::size_t(md.max_blocks_per_seq)});
      })
      .def_prop_ro("slot_mapping", [](const BatchMetadata& md) { return numpy_copy(md.slot_mapping, {md.slot_mapping.size()}); })
      .def("__repr__", &BatchMetadata::to_string);

  auto attention = nb::class_<Attention>(m, "Attention",
                        "One attention layer: the selector's decision for `config` and the chosen backend's\n"
                        "implementation. plan once per step, run once per layer (forward = both); arrays go to the\n"
                        "kernels without copies and the GIL is released while they run.")
      .def("__init__",
           [](Attention* self, const LayerConfig& config, nb::handle backend, nb::handle scale, nb::handle sinks,
              nb::handle alibi_slopes, int num_threads, nb::handle w_uk, nb::handle w_uv) {
             SelectOptions o;
             if (!backend.is_none()) o.backend = str_from_py(backend, "backend");
             LayerParams p;
             p.config = config;
             p.scale = scale_from_py(scale);
             p.sinks = floats_from_py(sinks, "sinks");
             p.alibi_slopes = floats_from_py(alibi_slopes, "alibi_slopes");
             p.num_threads = num_threads;
             p.mla_w_uk = up_projection_from_py(w_uk, "w_uk", config, config.qk_nope_head_dim);
             p.mla_w_uv = up_projection_from_py(w_uv, "w_uv", config, config.v_head_dim);
             if (w_uk.is_none() != w_uv.is_none())
               throw Error(std::string("w_uv=") + (w_uv.is_none() ? "None" : "<array>") +
                           " invalid: expected w_uk and w_uv together (the expanded MLA form needs both)");
             new (self) Attention(std::move(p), o);
           },
           nb::arg("config"), nb::arg("backend") = nb::none(), nb::kw_only(), nb::arg("scale") = nb::none(),
           nb::arg("sinks") = nb::none(), nb::arg("alibi_slopes") = nb::none(), nb::arg("num_threads") = 0,
           nb::arg("w_uk") = nb::none(), nb::arg("w_uv") = nb::none())
      .def_prop_ro("config", [](const Attention& a) { return a.config(); })
      .def_prop_ro("decision", [](const Attention& a) { return a.decision(); })
      .def_prop_ro("backend", [](const Attention& a) { return a.backend(); })
      .def_prop_ro("variant", [](const Attention& a) { return a.variant(); })
      .def_prop_ro("scale", [](const Attention& a) { return a.params().effective_scale(); })
      .def_prop_ro("block_size", [](const Attention& a) { return a.block_size(); },
                   "The KV block size for this layer: the user's, else the backend's preferred.")
      .def(
          "make_cache",
          [](const Attention& a, int32_t num_blocks, int32_t block_size) {
            return KVCache(a.cache_spec(num_blocks, block_size));
          },
          nb::arg("num_blocks"), nb::arg("block_size") = 0,
          "A KV cache in the layout, dtype and block size this layer's backend wants.")
      .def(
          "kv_cache_shape",
          [](const Attention& a, int32_t num_blocks, int32_t block_size) {
            return to_tuple(a.cache_spec(num_blocks, block_size).shape());
          },
          nb::arg("num_blocks"), nb::arg("block_size") = 0,
          "The shape of the cache tensor this layer reads (for an engine that allocates it and wraps it with\n"
          "KVCache.from_dlpack(tensor, layout=layer.kv_cache_layout)); block_size 0 = the layer's.")
      .def_prop_ro("kv_cache_dtype",
                   [](const Attention& a) { return std::string(to_string(a.cache_spec(1, 0).dtype)); },
                   "The cache storage dtype this layer reads (bfloat16, fp8_e4m3, ...).")
      .def_prop_ro("kv_cache_layout",
                   [](const Attention& a) { return std::string(to_string(a.cache_spec(1, 0).layout)); },
                   "The cache layout this layer reads: NHD, HND, HND_PAIRS or MLA.")
      .def(
          "write_kv",
          [](const Attention& a, nb::handle k, nb::handle v, KVCache& cache, const BatchMetadata& md) {
            ArrayArg ka = array_arg(k, "k", false);
            // MLA caches hold one latent entry per token: v is unused there and may be None.
            ArrayArg va = v.is_none() ? ArrayArg{} : array_arg(v, "v", false);
            unflatten_heads(ka, a.config().num_kv_heads, "k");
            if (!v.is_none()) unflatten_heads(va, a.config().num_kv_heads, "v");
            require_device(a, ka, "k");
            if (!v.is_none()) require_device(a, va, "v");
            check_storage(cache);
            const int64_t saturated_before = cache.saturated_values();
            {
              nb::gil_scoped_release release;
              a.write_kv(ka.view, va.view, cache, md);
            }
            warn_if_saturated(cache, saturated_before);
          },
          nb::arg("k"), nb::arg("v").none(), nb::arg("cache"), nb::arg("metadata"),
          "k: [num_tokens, num_kv_heads, head_size], v: [num_tokens, num_kv_heads, head_size_v]: the step's new\n"
          "keys and values, stored into the slots of metadata.slot_mapping (quantized for fp8 caches).")
      // Layer::to_string under the Python class's name: "Attention(backend='cpu_flash', ...)".
      .def("__repr__", [](const Attention& a) { return "Attention" + a.to_string().substr(std::string_view("Layer").size()); });
  bind_step(m, attention);
}

}  // namespace attn::py
