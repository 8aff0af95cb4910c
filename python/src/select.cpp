// attn.select / attn.explain → attn.Decision (with every candidate's reasons), attn.select_mamba,
// and attn.load_model (the per-layer configs attn.plan() selects for).
#include <string>

#include "attn/mamba.hpp"
#include "attn/plan.hpp"
#include "bind.hpp"

namespace attn::py {
namespace {

SelectOptions select_options(nb::handle backend, nb::handle platform, nb::handle per_kind) {
  SelectOptions o;
  if (!backend.is_none()) o.backend = str_from_py(backend, "backend");
  if (!platform.is_none()) o.platform = platform_from_py(platform);
  if (!per_kind.is_none() && !nb::try_cast(per_kind, o.per_kind))
    throw nb::type_error(("per_kind=" + text_of(nb::repr(per_kind)) +
                          " invalid: expected a dict of layer kind (str) to backend name (str)").c_str());
  return o;
}

std::string candidate_repr(const Candidate& c) {
  std::string s = "Candidate(backend='" + c.backend + "', valid=" + (c.valid ? "True" : "False") +
                  ", priority=" + std::to_string(c.priority);
  if (!c.reasons.empty()) {
    s += ", reasons=[";
    for (std::size_t i = 0; i < c.reasons.size(); ++i) s += (i ? "; " : "") + c.reasons[i].to_string();
    s += "]";
  }
  return s + ")";
}

}  // namespace

void bind_select(nb::module_& m) {
  nb::class_<Reason>(m, "Reason", "Why a backend cannot serve a layer: field, the layer's value, what is supported.")
      .def_prop_ro("field", [](const Reason& r) { return r.field.name(); })
      .def_ro("value", &Reason::value)
      .def_ro("expected", &Reason::expected)
      .def("__str__", &Reason::to_string)
      .def("__repr__", [](const Reason& r) { return "Reason('" + r.to_string() + "')"; })
      .def("__eq__", [](const Reason& a, const Reason& b) { return a == b; });

  nb::class_<Candidate>(m, "Candidate", "One backend the selector checked.")
      .def_ro("backend", &Candidate::backend)
      .def_ro("valid", &Candidate::valid)
      .def_ro("priority", &Candidate::priority)
      .def_ro("reasons", &Candidate::reasons)
      .def("to_dict", [](const Candidate& c) { return json_loads(to_json(c)); })
      .def("__repr__", &candidate_repr);

  nb::class_<Decision>(m, "Decision", "The selector's answer: the chosen backend and why every other one lost.")
      .def_ro("backend", &Decision::backend)
      .def_ro("variant", &Decision::variant)
      .def_ro("config", &Decision::config)
      .def_ro("platform", &Decision::platform)
      .def_ro("forced_by", &Decision::forced_by)
      .def_ro("block_size", &Decision::block_size)
      .def_ro("block_size_from_user", &Decision::block_size_from_user)
      .def_ro("tuned", &Decision::tuned)
      .def_ro("candidates", &Decision::candidates)
      .def_ro("notes", &Decision::notes)
      .def_ro("slow_path", &Decision::slow_path, "why the slow correctness oracle serves the layer; empty otherwise")
      .def("to_text", &Decision::to_text)
      .def("to_json", [](const Decision& d) { return to_json(d); })
      .def("to_dict", [](const Decision& d) { return json_loads(d.to_json()); })
      .def("__repr__", &Decision::to_text)
      .def("__str__", &Decision::to_text);

  // select() raises when nothing serves the layer; explain() returns that Decision (backend "").
  using Chooser = Decision (*)(const LayerConfig&, const SelectOptions&);
  const std::pair<const char*, Chooser> choosers[] = {{"select", &select}, {"explain", &explain}};
  const char* docs[] = {
      "Picks the backend for one layer (explicit backend > env ATTN_BACKEND > priority), or raises\n"
      "attn.Error listing every candidate with its reasons.",
      "Like select(), but returns the Decision (backend '') when no backend is valid."};
  for (int i = 0; i < 2; ++i) {
    Chooser choose = choosers[i].second;
    m.def(
        choosers[i].first,
        [choose](const LayerConfig& config, nb::handle backend, nb::handle platform, nb::handle per_kind) {
          return choose(config, select_options(backend, platform, per_kind));
        },
        nb::arg("config"), nb::arg("backend") = nb::none(), nb::arg("platform") = nb::none(), nb::kw_only(),
        nb::arg("per_kind") = nb::none(), docs[i]);
  }
  m.def("clear_selector_cache", &clear_selector_cache);

  m.def(
      "select_mamba",
      [](const std::string& mixer_type, nb::handle backend, nb::handle platform) {
        MambaSelectOptions o;
        if (!backend.is_none()) o.backend = str_from_py(backend, "backend");
        if (!platform.is_none()) o.platform = platform_from_py(platform);
        return select_mamba(parse_mamba_type(mixer_type), o);
      },
      nb::arg("mixer_type"), nb::arg("backend") = nb::none(), nb::arg("platform") = nb::none(),
      "The mixer backend for a Mamba-family layer type (mamba1, mamba2, short_conv, linear_attention,\n"
      "gdn_attention, custom); its Decision's candidates say why the other mixers do not serve it.");
  m.def("mixer_backends", [] {
    std::vector<nb::dict> out;
    for (const auto& d : mixer_backends()) {
      nb::dict r;
      r["name"] = d->name, r["summary"] = d->summary;
      std::vector<std::string> types;
      for (auto t : d->caps.types) types.emplace_back(to_string(t));
      r["types"] = types;
      std::vector<std::string> platforms;
      for (auto k : d->caps.platforms) platforms.emplace_back(to_string(k));
      r["platforms"] = platforms;
      r["variant"] = d->variant ? d->variant(detect_cpu()) : std::string();
      out.push_back(r);
    }
    return out;
  }, "Every mixer backend: name, summary, the mixer types and platforms it serves, its kernel variant here.");

  nb::class_<ModelLayer>(m, "ModelLayer", "One layer of a model: attention (with its LayerConfig) or a mixer.")
      .def_ro("index", &ModelLayer::index)
      .def_prop_ro("kind", [](const ModelLayer& l) { return std::string(to_string(l.kind)); })
      .def_ro("attention", &ModelLayer::attention)
      .def_prop_ro("mixer", [](const ModelLayer& l) -> std::optional<std::string> {
        if (l.kind != LayerKind::mixer) return std::nullopt;
        return std::string(to_string(l.mixer));
      })
      .def_ro("mixer_dims", &ModelLayer::mixer_dims)
      .def_ro("softmax_scale", &ModelLayer::softmax_scale)
      .def("__repr__", [](const ModelLayer& l) {
        return "ModelLayer(index=" + std::to_string(l.index) + ", " +
               (l.kind == LayerKind::attention ? l.attention.to_string() : "mixer=" + std::string(to_string(l.mixer))) + ")";
      });

  nb::class_<ModelSpec>(m, "ModelSpec", "A model config (built-in name or config.json) as per-layer configs.")
      .def_ro("name", &ModelSpec::name)
      .def_ro("architecture", &ModelSpec::architecture)
      .def_ro("hidden_size", &ModelSpec::hidden_size)
      .def_ro("num_layers", &ModelSpec::num_layers)
      .def_ro("layers", &ModelSpec::layers)
      .def("__repr__", [](const ModelSpec& s) {
        return "ModelSpec(name='" + s.name + "', architecture='" + s.architecture + "', num_layers=" +
               std::to_string(s.num_layers) + ")";
      });

  m.def(
      "load_model",
      [](const std::string& model, nb::handle dtype, nb::handle kv_cache_dtype, int block_size) {
        ModelOverrides o;
        if (!dtype.is_none()) o.dtype = dtype_from_py(dtype);
        if (!kv_cache_dtype.is_none()) o.kv_cache_dtype = kv_cache_dtype_from_py(kv_cache_dtype);
        o.block_size = block_size;
        return load_model(model, o);
      },
      nb::arg("model"), nb::kw_only(), nb::arg("dtype") = nb::none(), nb::arg("kv_cache_dtype") = nb::none(),
      nb::arg("block_size") = 0,
      "Loads a built-in model by name or a Hugging Face config.json (path or folder).");
  m.def("builtin_models", &builtin_models, "Names of the shipped model configs.");

  nb::class_<PlanGroup>(m, "PlanGroup", "Layers of one configuration and the decision that serves them all.")
      .def_ro("layers", &PlanGroup::layers)
      .def_ro("layer_ranges", &PlanGroup::layer_ranges, "the layers as '0-31' or '0,2,4,...,46'")
      .def_ro("whole", &PlanGroup::whole, "the first layer, before sharding")
      .def_ro("sample", &PlanGroup::sample, "one tensor-parallel rank's share of the first layer")
      .def_ro("sharding", &PlanGroup::sharding)
      .def_ro("decision", &PlanGroup::decision)
      .def_ro("error", &PlanGroup::error)
      .def_prop_ro("kind", [](const PlanGroup& g) { return std::string(to_string(g.whole.kind)); });

  nb::class_<ModelPlan>(m, "ModelPlan", "A model's layers grouped by configuration, one decision per group.")
      .def_ro("model", &ModelPlan::model)
      .def_ro("rank_model", &ModelPlan::rank_model)
      .def_ro("platform", &ModelPlan::platform)
      .def_ro("tensor_parallel", &ModelPlan::tensor_parallel)
      .def_ro("pipeline_parallel", &ModelPlan::pipeline_parallel)
      .def_ro("groups", &ModelPlan::groups)
      .def("all_served", &ModelPlan::all_served)
      .def("to_json", [](const ModelPlan& p) { return to_json(p); })
      .def("to_dict", [](const ModelPlan& p) { return json_loads(to_json(p)); });

  m.def(
      "plan_model",
      [](const ModelSpec& model, nb::handle platform, nb::handle backend, int tensor_parallel, int pipeline_parallel) {
        PlanOptions o;
        if (!backend.is_none()) o.select.backend = nb::cast<std::string>(backend);
        o.tensor_parallel = tensor_parallel;
        o.pipeline_parallel = pipeline_parallel;
        return plan_model(model, platform_from_py(platform), o);
      },
      nb::arg("model"), nb::arg("platform") = nb::none(), nb::kw_only(), nb::arg("backend") = nb::none(),
      nb::arg("tensor_parallel") = 1, nb::arg("pipeline_parallel") = 1,
      "Groups a model's equal layers and decides each group on platform (the library's attn plan).");
}

}  // namespace attn::py
