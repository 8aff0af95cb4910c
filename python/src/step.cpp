// attn.StepPlan, attn.Workspace and Attention.plan / run / forward: plan once per engine step,
// run once per layer. run() holds no lock: the layer keeps no per-call state, so threads may run
// layers (and one layer) at once with the GIL released; a Workspace serves one run at a time.
#include <atomic>
#include <memory>
#include <string>

#include "layer.hpp"

namespace attn::py {
namespace {

/// A backend's plan of one step (immutable, shared by every layer of an equal config).
struct PyStepPlan {
  std::shared_ptr<const StepPlan> plan;
};

/// Caller-owned scratch for runs; `busy` makes a second concurrent run with it raise instead of
/// racing on the memory.
struct PyWorkspace {
  Workspace ws;
  std::atomic<bool> busy{false};
};

/// Holds a workspace for the length of one run.
class WorkspaceLease {
 public:
  explicit WorkspaceLease(PyWorkspace* w) : w_(w) {
    if (w_ && w_->busy.exchange(true))
      throw Error("workspace=<a Workspace in use by another run> invalid: expected a Workspace no other thread is "
                  "running with (give each thread its own)");
  }
  ~WorkspaceLease() {
    if (w_) w_->busy.store(false);
  }
  WorkspaceLease(const WorkspaceLease&) = delete;
  WorkspaceLease& operator=(const WorkspaceLease&) = delete;
  Workspace* get() const { return w_ ? &w_->ws : nullptr; }

 private:
  PyWorkspace* w_;
};

/// The int32 top-k index array of a sparse layer, seen without copying (the core checks its shape).
struct IndexArg {
  nb::ndarray<nb::ro> array;
  TensorView view;
};

IndexArg index_arg(nb::handle h) {
  IndexArg out;
  if (h.is_none()) return out;
  if (!nb::try_cast(h, out.array, /*convert=*/false) || out.array.dtype() != nb::dtype<int32_t>() ||
      out.array.device_type() != nb::device::cpu::value)
    throw nb::type_error(("topk_indices=<" + text_of(nb::object(h.type().attr("__name__"))) + ", dtype " +
                          describe_dtype(h) + "> invalid: expected a CPU int32 NumPy array or DLPack tensor "
                          "[num_tokens, topk]").c_str());
  TensorView& v = out.view;
  v.dtype = DType::int32;
  v.device = DeviceKind::cpu;
  v.data = const_cast<void*>(out.array.data());
  require(out.array.ndim() <= std::size_t(TensorView::kMaxDims), "topk_indices.ndim", out.array.ndim(), "2");
  v.ndim = int(out.array.ndim());
  for (int d = 0; d < v.ndim; ++d) v.shape[d] = out.array.shape(d), v.strides[d] = out.array.stride(d);
  return out;
}

/// One layer's run under `plan`: arrays are imported (no copies) with the GIL held, the kernel
/// runs without it. Returns `out`, or a new array like q when out is None.
nb::object run_layer(const Attention& a, const StepPlan& plan, nb::handle q, KVCache& cache, nb::handle out, nb::handle k,
                     nb::handle v, nb::handle topk_indices, const std::string& mla_form, PyWorkspace* workspace) {
  ForwardArgs args;
  args.mla_form = parse_mla_form(mla_form);
  const LayerConfig& c = a.config();
  ArrayArg qa = array_arg(q, "q", false);
  const bool flat = qa.view.ndim == 2;  // [tokens, heads * head_size] in, the same form out
  unflatten_heads(qa, c.num_heads, "q");
  require_dtype(qa, "q", c.dtype);
  require_device(a, qa, "q");
  nb::object result = nb::borrow(out);
  if (out.is_none()) {
    const int64_t tokens = plan.metadata().num_tokens, width = a.out_width(cache.spec(), args.mla_form);
    result = new_output_like(q, flat ? std::vector<int64_t>{tokens, c.num_heads * width} : std::vector<int64_t>{tokens, c.num_heads, width},
                             c.dtype);
  }
  ArrayArg oa = array_arg(result, "out", true);
  unflatten_heads(oa, c.num_heads, "out");
  require_dtype(oa, "out", a.config().dtype);
  require_device(a, oa, "out");
  ArrayArg ka, va;
  if (!k.is_none()) {
    ka = array_arg(k, "k", false);
    if (cache.spec().layout != KVLayout::MLA) unflatten_heads(ka, c.num_kv_heads, "k");
    require_device(a, ka, "k");
    args.new_k = ka.view;
    if (!v.is_none()) {
      va = array_arg(v, "v", false);
      unflatten_heads(va, c.num_kv_heads, "v");
      require_device(a, va, "v");
      args.new_v = va.view;
    } else if (cache.spec().layout == KVLayout::MLA && ka.view.ndim == 3) {
      // An MLA cache holds one latent entry per token; its value is the first head_size_v values.
      args.new_v = ka.view;
      args.new_v.shape[2] = std::min<int64_t>(args.new_v.shape[2], cache.spec().v_width());
    } else {
      throw Error("v=None invalid: expected the step's values with k (only MLA caches take k alone)");
    }
  } else if (!v.is_none()) {
    throw Error("k=None invalid: expected the step's keys with v");
  }
  IndexArg idx = index_arg(topk_indices);
  args.q = qa.view, args.out = oa.view, args.topk_indices = idx.view, args.cache = &cache;
  check_storage(cache);
  const int64_t saturated_before = cache.saturated_values();
  {
    nb::gil_scoped_release release;
    WorkspaceLease lease(workspace);
    args.workspace = lease.get();
    if (args.workspace) {
      a.run(plan, args);
    } else {  // forward(), or run() without a Workspace: the thread's kept scratch
      const KeptScratch kept(a.device(), plan.workspace_bytes());
      args.workspace = kept.get();
      a.run(plan, args);
    }
  }
  if (args.new_k.data) warn_if_saturated(cache, saturated_before);
  return result;
}

constexpr const char* kRunDoc =
    "q: [num_tokens, num_heads, head_size] -> out: [num_tokens, num_heads, head_size_v], written in place into `out`\n"
    "when given (and returned), else into a new array like q. k / v: this step's new keys and values, written into\n"
    "the cache (metadata.slot_mapping) before attending. topk_indices: [num_tokens, topk] int32 positions for top-k\n"
    "sparse layers (-1 = padding). mla_form: 'absorbed' (q in latent space) or 'expanded' (q [.., qk_nope +\n"
    "qk_rope], out [.., v_head_dim]; needs w_uk / w_uv). workspace: scratch reused across calls (one per thread);\n"
    "None allocates per call.";

}  // namespace

void bind_step(nb::module_& m, nb::class_<Attention>& attention) {
  nb::class_<PyWorkspace>(m, "Workspace",
                          "Scratch memory for Attention.run, owned by the caller and reused across layers and steps\n"
                          "(it grows to what a plan needs and never shrinks). One run at a time: give each thread its own.")
      .def("__init__", [](PyWorkspace* self, std::size_t bytes) { new (self) PyWorkspace(); self->ws.reserve(bytes); },
           nb::arg("bytes") = 0)
      .def_prop_ro("nbytes", [](const PyWorkspace& w) { return w.ws.bytes(); })
      .def("reserve", [](PyWorkspace& w, std::size_t bytes) {
             WorkspaceLease lease(&w);
             w.ws.reserve(bytes);
           }, nb::arg("bytes"), "Grows the workspace to at least `bytes` (never shrinks).")
      .def("__repr__", [](const PyWorkspace& w) { return "Workspace(" + std::to_string(w.ws.bytes()) + " bytes)"; });

  nb::class_<PyStepPlan>(m, "StepPlan",
                         "One step planned by a backend for a layer config: the validated metadata and the backend's\n"
                         "work layout. Immutable; every layer with the same backend and config runs under it.")
      .def_prop_ro("backend", [](const PyStepPlan& p) { return p.plan->backend(); })
      .def_prop_ro("config", [](const PyStepPlan& p) { return p.plan->config(); })
      .def_prop_ro("metadata", [](const PyStepPlan& p) { return p.plan->metadata(); })
      .def_prop_ro("workspace_bytes", [](const PyStepPlan& p) { return p.plan->workspace_bytes(); },
                   "Scratch bytes a run needs (size a Workspace with it).")
      .def_prop_ro("preferred_mla_form", [](const PyStepPlan& p) { return std::string(to_string(p.plan->preferred_mla_form())); },
                   "MLA: 'expanded' when that form needs fewer FLOPs for this step, else 'absorbed'.")
      .def("__repr__", [](const PyStepPlan& p) { return p.plan->to_string(); });

  nb::class_<StepPlans>(m, "StepPlans",
                         "One engine step's plans, one per backend, layer config, kernel variant and cache geometry:\n"
                         "planned on the first layer that asks, shared by every layer of its group.")
      .def(nb::init<BatchMetadata>(), nb::arg("metadata"))
      .def(
          "for_layer",
          [](StepPlans& plans, const Attention& a, const KVCache& cache) {
            nb::gil_scoped_release release;
            return PyStepPlan{plans.shared_for_layer(a, cache.spec())};
          },
          nb::arg("layer"), nb::arg("cache"), "The plan `layer` runs this step over `cache` (planned on first use).")
      .def_prop_ro("metadata", &StepPlans::metadata)
      .def_prop_ro("workspace_bytes", &StepPlans::workspace_bytes, "Scratch bytes the largest plan's run needs.")
      .def("__len__", &StepPlans::size)
      .def("__repr__", [](const StepPlans& p) { return "StepPlans(" + std::to_string(p.size()) + " plans)"; });

  attention
      .def(
          "plan",
          [](const Attention& a, const BatchMetadata& md, const KVCache& cache) {
            nb::gil_scoped_release release;
            return PyStepPlan{a.plan(md, cache.spec())};
          },
          nb::arg("metadata"), nb::arg("cache"),
          "Validates the step's metadata against the cache geometry once and plans it; the plan serves every\n"
          "layer of this backend and config in the step (each with its own cache of the same geometry).")
      .def(
          "run",
          [](const Attention& a, const PyStepPlan& plan, nb::handle q, KVCache& cache, nb::handle out, nb::handle k,
             nb::handle v, nb::handle topk_indices, const std::string& mla_form, PyWorkspace* workspace) {
            return run_layer(a, *plan.plan, q, cache, out, k, v, topk_indices, mla_form, workspace);
          },
          nb::arg("plan"), nb::arg("q"), nb::arg("cache"), nb::arg("out") = nb::none(), nb::kw_only(),
          nb::arg("k") = nb::none(), nb::arg("v") = nb::none(), nb::arg("topk_indices") = nb::none(),
          nb::arg("mla_form") = "absorbed", nb::arg("workspace").none() = nb::none(), kRunDoc)
      .def(
          "forward",
          [](const Attention& a, nb::handle q, KVCache& cache, const BatchMetadata& md, nb::handle out, nb::handle k,
             nb::handle v, nb::handle topk_indices, const std::string& mla_form) {
            std::shared_ptr<const StepPlan> plan;
            {
              nb::gil_scoped_release release;
              plan = a.plan(md, cache.spec());
            }
            return run_layer(a, *plan, q, cache, out, k, v, topk_indices, mla_form, nullptr);
          },
          nb::arg("q"), nb::arg("cache"), nb::arg("metadata"), nb::arg("out") = nb::none(), nb::kw_only(),
          nb::arg("k") = nb::none(), nb::arg("v") = nb::none(), nb::arg("topk_indices") = nb::none(),
          nb::arg("mla_form") = "absorbed",
          "plan + run in one call (a step with one layer, tests, one-off calls). Arguments as in run().");
}

}  // namespace attn::py
