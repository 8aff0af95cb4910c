// attn.tune: time every valid backend × variant × block size of a model's (or some layers')
// configs on this machine, write the tuning file, and let the selector prefer the fastest.
#include "bind.hpp"

namespace attn::py {

void bind_tune(nb::module_& m) {
  m.def(
      "tune",
      [](nb::handle model, std::optional<std::vector<LayerConfig>> configs, double budget, int threads, int decode_batch,
         int decode_context, int prefill_len, std::optional<std::string> backend, std::optional<std::string> output,
         bool progress) {
        if (model.is_none() == !configs.has_value())
          throw Error("tune: give a model (built-in name or config.json path) or configs (a list of LayerConfig), not both or neither");
        std::vector<LayerConfig> layers = configs.value_or(std::vector<LayerConfig>{});
        if (!model.is_none()) {
          for (const auto& l : load_model(nb::cast<std::string>(model)).layers)
            if (l.kind == LayerKind::attention) layers.push_back(l.attention);
        }
        TuneOptions o;
        o.budget_s = budget, o.threads = threads, o.decode_batch = decode_batch, o.decode_context = decode_context;
        o.prefill_len = prefill_len, o.backend = backend.value_or("");
        if (progress) o.progress = progress_to_stderr();
        std::string written;
        TuningFile file;
        {
          nb::gil_scoped_release unlocked;  // seconds of timing; the progress line does not touch Python
          file = tune(layers, o);
          written = save_tuning(file, output.value_or(""));
        }
        nb::dict out = nb::cast<nb::dict>(json_loads(file.to_json()));
        out["path"] = written;
        return out;
      },
      nb::arg("model") = nb::none(), nb::kw_only(), nb::arg("configs") = nb::none(), nb::arg("budget") = 20.0,
      nb::arg("threads") = 0, nb::arg("decode_batch") = 4, nb::arg("decode_context") = 1024, nb::arg("prefill_len") = 256,
      nb::arg("backend") = nb::none(), nb::arg("output") = nb::none(), nb::arg("progress") = true,
      "Times every valid backend, kernel variant and block size of the model's layer configs (or `configs`) here,\n"
      "writes the tuning file (merged with this machine's earlier results) and returns it as a dict with its 'path'.\n"
      "select() then prefers the measured fastest valid choice; Decision.tuned says when it did.");
  m.def("tuning_file_path", &tuning_file_path, "Where select() reads the tuning file ('' when ATTN_TUNE_FILE=off).");
  m.def("reload_tuning", &reload_tuning, "Reads the tuning file again (e.g. after ATTN_TUNE_FILE changed).");
}

}  // namespace attn::py
