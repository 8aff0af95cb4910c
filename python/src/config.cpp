// attn.Error, attn.LayerConfig (keyword arguments mirroring the seeds / C++ fields),
// attn.Platform / attn.platform(), and attn.backends() capability records.
#include <functional>
#include <map>
#include <string>

#include "bind.hpp"

namespace attn::py {
namespace {

// Every LayerConfig field, once: the keyword constructor, the properties and the stubs read it.
#define ATTN_PY_INT_FIELDS(X)                                                                          \
  X(num_heads) X(num_kv_heads) X(head_size) X(head_size_v) X(block_size) X(sliding_window)              \
  X(bs_block_size) X(bs_local_blocks) X(bs_vert_stride) X(bs_head_sliding_step) X(kv_lora_rank)      \
  X(qk_rope_head_dim) X(qk_nope_head_dim) X(v_head_dim) X(index_topk)
#define ATTN_PY_BOOL_FIELDS(X)                                                                         \
  X(use_alibi) X(has_sink) X(use_mla) X(use_sparse) X(use_mm_prefix) X(use_per_head_quant_scales)      \
  X(is_attention_free) X(use_block_sparse) X(use_non_causal) X(use_batch_invariant) X(use_kv_connector)

using Setter = std::function<void(LayerConfig&, nb::handle)>;

template <typename T>
T cast_field(const char* field, nb::handle v, const char* expected) {
  T out{};
  if (!nb::try_cast(v, out)) {
    throw nb::type_error((std::string("LayerConfig.") + field + "=" + nb::cast<std::string>(nb::repr(v)) +
                          " invalid: expected " + expected).c_str());
  }
  return out;
}

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> table = [] {
    std::map<std::string, Setter> t;
#define ATTN_PY_SET_INT(f) t[#f] = [](LayerConfig& c, nb::handle v) { c.f = cast_field<int>(#f, v, "an int"); };
#define ATTN_PY_SET_BOOL(f) t[#f] = [](LayerConfig& c, nb::handle v) { c.f = cast_field<bool>(#f, v, "a bool"); };
    ATTN_PY_INT_FIELDS(ATTN_PY_SET_INT)
    ATTN_PY_BOOL_FIELDS(ATTN_PY_SET_BOOL)
    t["logits_soft_cap"] = [](LayerConfig& c, nb::handle v) {
      c.logits_soft_cap = v.is_none() ? 0.0f : cast_field<float>("logits_soft_cap", v, "a float (0 or None = none)");
    };
    t["dtype"] = [](LayerConfig& c, nb::handle v) { c.dtype = dtype_from_py(v); };
    t["kv_cache_dtype"] = [](LayerConfig& c, nb::handle v) { c.kv_cache_dtype = kv_cache_dtype_from_py(v); };
    // The seeds pass attn_type=None for decoder layers and sliding_window=None for none.
    t["attn_type"] = [](LayerConfig& c, nb::handle v) {
      c.attn_type = v.is_none() ? AttnType::decoder : parse_attn_type(cast_field<std::string>("attn_type", v, "a str"));
    };
    t["sliding_window"] = [](LayerConfig& c, nb::handle v) {
      c.sliding_window = v.is_none() ? 0 : cast_field<int>("sliding_window", v, "an int (0 or None = none)");
    };
    return t;
  }();
  return table;
}

void set_fields(LayerConfig& c, const nb::kwargs& kw) {
  const auto& table = setters();
  for (auto [key, value] : kw) {
    const std::string name = nb::cast<std::string>(key);
    auto it = table.find(name);
    if (it == table.end()) {
      std::vector<std::string> valid;
      for (auto& [n, _] : table) valid.push_back(n);
      throw nb::type_error(("LayerConfig got an unexpected keyword '" + name + "'; valid keywords are: " + join(valid)).c_str());
    }
    it->second(c, value);
  }
}

std::vector<std::string> names_of(const auto& values) {
  std::vector<std::string> out;
  for (const auto& v : values) out.emplace_back(to_string(v));
  return out;
}

/// One backend's capabilities, as plain Python-readable data.
struct BackendInfo {
  std::string name, summary, kv_layout, module, variant;
  int priority = 0, preferred_block_size = 0;
  std::vector<std::string> platforms, dtypes, kv_cache_dtypes, attn_types, required_cpu_features, features;
  std::string head_sizes, block_sizes, compute_capability;
  nb::object kv_layout_rule;  // None, or {"q_dtypes", "storage_dtypes", "otherwise", "cpu_features"}: the caches kv_layout is kept for

  /// Read from the library's JSON record of the backend (attn::to_json), the one rendering
  /// `attn backends` prints too.
  explicit BackendInfo(const BackendDescriptor& d) {
    const nb::dict j = nb::cast<nb::dict>(json_loads(to_json(d, detect_cpu())));
    const nb::dict c = nb::cast<nb::dict>(j["capabilities"]);
    auto text = [](const nb::dict& from, const char* key) { return nb::cast<std::string>(from[key]); };
    auto list = [](const nb::dict& from, const char* key) { return nb::cast<std::vector<std::string>>(from[key]); };
    name = text(j, "name"), summary = text(j, "summary"), module = text(j, "module");
    kv_layout = text(j, "kv_layout"), variant = text(j, "variant");
    kv_layout_rule = j["kv_layout_rule"];
    priority = nb::cast<int>(j["priority"]), preferred_block_size = nb::cast<int>(j["preferred_block_size"]);
    platforms = list(c, "platforms"), dtypes = list(c, "dtypes"), kv_cache_dtypes = list(c, "kv_cache_dtypes");
    attn_types = list(c, "attn_types"), required_cpu_features = list(c, "required_cpu_features");
    features = list(c, "features");
    head_sizes = text(c, "head_sizes"), block_sizes = text(c, "block_sizes");
    const bool has_min = c.contains("min_compute_capability"), has_max = c.contains("max_compute_capability");
    if (has_min || has_max)
      compute_capability = (has_min ? text(c, "min_compute_capability") : "") + ".." + (has_max ? text(c, "max_compute_capability") : "");
  }

  std::string repr() const {
    return "BackendInfo(name='" + name + "', priority=" + std::to_string(priority) + ", platforms=[" + join(platforms) +
           "], dtypes=[" + join(dtypes) + "], head_sizes='" + head_sizes + "', features=[" + join(features) + "]" +
           (variant.empty() ? "" : ", variant='" + variant + "'") + ")";
  }
};

}  // namespace

void bind_errors(nb::module_& m) {
  // attn::Error is bad input or an unsupported request: a ValueError subclass carrying the C++ text.
  nb::exception<Error>(m, "Error", PyExc_ValueError);
}

void bind_config(nb::module_& m) {
  auto cls = nb::class_<LayerConfig>(m, "LayerConfig",
                                     "Everything the selector may look at for one layer (the selector key).\n"
                                     "Keyword arguments mirror the C++ fields; dtype / kv_cache_dtype / attn_type take\n"
                                     "names or NumPy / ml_dtypes / torch dtypes.");
  // help(attn.LayerConfig) shows every keyword and its default, not just **kwargs.
  static const std::string init_sig = [] {
    const LayerConfig d;
    std::string sig = "def __init__(self, *";
#define ATTN_PY_SIG_INT(f) sig += ", " #f ": int = " + std::to_string(d.f);
#define ATTN_PY_SIG_BOOL(f) sig += std::string(", " #f ": bool = ") + (d.f ? "True" : "False");
    ATTN_PY_INT_FIELDS(ATTN_PY_SIG_INT)
    ATTN_PY_BOOL_FIELDS(ATTN_PY_SIG_BOOL)
    sig += ", logits_soft_cap: float | None = None, dtype: str | object = '" + std::string(to_string(d.dtype)) +
           "', kv_cache_dtype: str | object | None = None, attn_type: str | None = None) -> None";
    return sig;
  }();
  cls.def("__init__", [](LayerConfig* self, nb::kwargs kw) {
    new (self) LayerConfig();
    set_fields(*self, kw);
  }, nb::sig(init_sig.c_str()));
#define ATTN_PY_RW(f) cls.def_rw(#f, &LayerConfig::f);
  ATTN_PY_INT_FIELDS(ATTN_PY_RW)
  ATTN_PY_BOOL_FIELDS(ATTN_PY_RW)
  cls.def_rw("logits_soft_cap", &LayerConfig::logits_soft_cap);
  cls.def_prop_rw(
      "dtype", [](const LayerConfig& c) { return std::string(to_string(c.dtype)); },
      [](LayerConfig& c, nb::handle v) { c.dtype = dtype_from_py(v); });
  cls.def_prop_rw(
      "kv_cache_dtype", [](const LayerConfig& c) { return std::string(to_string(c.kv_cache_dtype)); },
      [](LayerConfig& c, nb::handle v) { c.kv_cache_dtype = kv_cache_dtype_from_py(v); });
  cls.def_prop_rw(
      "attn_type", [](const LayerConfig& c) { return std::string(to_string(c.attn_type)); },
      [](LayerConfig& c, const std::string& v) { c.attn_type = parse_attn_type(v); });
  cls.def_prop_ro("kind", &LayerConfig::kind, "vLLM's KV-cache spec kind (full_attention, sliding_window, ...)");
  cls.def_prop_ro("causal", &LayerConfig::causal);
  cls.def_prop_ro("effective_head_size_v", &LayerConfig::effective_head_size_v);
  cls.def("validate", &LayerConfig::validate, "Raises attn.Error for configs no backend could mean.");
  cls.def("replace", [](const LayerConfig& c, nb::kwargs kw) {
    LayerConfig copy = c;
    set_fields(copy, kw);
    return copy;
  }, "A copy with the given fields changed.");
  cls.def("to_dict", [](const LayerConfig& c) { return json_loads(layer_config_json(c)); });
  cls.def("__repr__", &LayerConfig::to_string);
  cls.def("__eq__", [](const LayerConfig& a, const LayerConfig& b) { return a == b; });
  cls.def("__hash__", &LayerConfig::hash);
  cls.def("__copy__", [](const LayerConfig& c) { return c; });
  cls.def("__deepcopy__", [](const LayerConfig& c, nb::handle) { return c; }, nb::arg("memo"));
  cls.def("__getstate__", [](const LayerConfig& c) { return layer_config_json(c); });
  cls.def("__setstate__", [](LayerConfig& c, const std::string& json) {
    new (&c) LayerConfig();
    nb::dict d = nb::cast<nb::dict>(json_loads(json));
    nb::kwargs kw;
    for (auto [k, v] : d) kw[k] = v;
    set_fields(c, kw);
  });

  nb::class_<Platform>(m, "Platform", "A machine a decision is made for: this CPU or a planning target.")
      .def_prop_ro("kind", &Platform::kind_name)
      .def_ro("name", &Platform::name)
      .def_ro("cpu_vendor", &Platform::cpu_vendor)
      .def_ro("cores", &Platform::cores)
      .def_prop_ro("features", [](const Platform& p) { return names_of(p.features); })
      .def_prop_ro("compute_capability",
                   [](const Platform& p) -> std::optional<std::string> {
                     if (p.kind != PlatformKind::cuda) return std::nullopt;
                     return p.cc.to_string();
                   })
      .def_ro("detected", &Platform::detected)
      .def("has", [](const Platform& p, const std::string& feature) {
        for (auto f : all_cpu_features())
          if (to_string(f) == feature) return p.has(f);
        throw Error("feature='" + feature + "' invalid: expected one of " + join(names_of(all_cpu_features())));
      })
      .def_prop_ro("fingerprint", &Platform::fingerprint)
      .def("__repr__", &Platform::to_string);

  m.def("platform", [](nb::handle spec) { return platform_from_py(spec); }, nb::arg("spec") = nb::none(),
        "This machine's CPU (spec=None) or a planning target: 'cpu:avx2', 'cpu:avx512', 'cuda', 'cuda:9.0'.");

  nb::class_<BackendInfo>(m, "BackendInfo", "One registered backend's capabilities (data, as the selector reads them).")
      .def_ro("name", &BackendInfo::name)
      .def_ro("summary", &BackendInfo::summary)
      .def_ro("priority", &BackendInfo::priority)
      .def_ro("preferred_block_size", &BackendInfo::preferred_block_size)
      .def_ro("kv_layout", &BackendInfo::kv_layout)
      .def_ro("kv_layout_rule", &BackendInfo::kv_layout_rule,
              "None (kv_layout for every cache), or the q / storage dtypes and CPU features kv_layout is kept for and the\n"
              "layout otherwise")
      .def_ro("module", &BackendInfo::module)
      .def_ro("variant", &BackendInfo::variant)
      .def_ro("platforms", &BackendInfo::platforms)
      .def_ro("dtypes", &BackendInfo::dtypes)
      .def_ro("kv_cache_dtypes", &BackendInfo::kv_cache_dtypes)
      .def_ro("head_sizes", &BackendInfo::head_sizes)
      .def_ro("block_sizes", &BackendInfo::block_sizes)
      .def_ro("attn_types", &BackendInfo::attn_types)
      .def_ro("required_cpu_features", &BackendInfo::required_cpu_features)
      .def_ro("compute_capability", &BackendInfo::compute_capability)
      .def_ro("features", &BackendInfo::features)
      .def("to_dict", [](const BackendInfo& b) {
        nb::dict d;
        d["name"] = b.name, d["summary"] = b.summary, d["priority"] = b.priority;
        d["preferred_block_size"] = b.preferred_block_size, d["kv_layout"] = b.kv_layout, d["module"] = b.module;
        d["kv_layout_rule"] = b.kv_layout_rule;
        d["variant"] = b.variant, d["platforms"] = b.platforms, d["dtypes"] = b.dtypes;
        d["kv_cache_dtypes"] = b.kv_cache_dtypes, d["head_sizes"] = b.head_sizes, d["block_sizes"] = b.block_sizes;
        d["attn_types"] = b.attn_types, d["required_cpu_features"] = b.required_cpu_features;
        d["compute_capability"] = b.compute_capability, d["features"] = b.features;
        return d;
      })
      .def("__repr__", &BackendInfo::repr);

  m.def("backends", [] {
    std::vector<BackendInfo> out;
    for (const auto& d : Registry::instance().backends()) out.emplace_back(*d);
    return out;
  }, "Every registered backend's capability record, in registration order.");
  m.def("load_plugin", [](const std::string& path) { Registry::instance().load_plugin(path); }, nb::arg("path"),
        "Loads an out-of-tree backend library (the ATTN_PLUGINS path, at run time).");
}

}  // namespace attn::py
