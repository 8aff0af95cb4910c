// `attn tune`: time every valid choice for a model's layer configs on this machine, write the
// tuning file, and show what the selector now picks.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>

#include "attn/checked.hpp"
#include "attn/error.hpp"
#include "attn/tune.hpp"
#include "commands.hpp"
#include "options.hpp"
#include "plan.hpp"

namespace attn_cli {
namespace {

std::string choice_label(const attn::TunedChoice& c) { return c.backend + (c.variant.empty() ? "" : "[" + c.variant + "]"); }

void print_config(const attn::TunedConfig& tc, const std::vector<int>& layers, const attn::ModelLayer& sample) {
  std::printf("\nlayers %s: %s\n", attn::layer_ranges(layers).c_str(), describe_layer(sample).c_str());
  std::printf("  %-26s %6s %12s %12s\n", "backend[variant]", "block", "decode ms", "prefill ms");
  for (const auto& c : tc.choices) {
    if (c.measured()) std::printf("  %-26s %6d %12.3f %12.3f\n", choice_label(c).c_str(), c.block_size, c.decode_us / 1e3, c.prefill_us / 1e3);
    else std::printf("  %-26s %6d  %s\n", choice_label(c).c_str(), c.block_size, c.error.c_str());
  }
}

}  // namespace

void add_tune_flags(CLI::App* cmd, TuneOptions& o) {
  cmd->add_option("model_name", o.model_arg, "built-in model name or path to a config.json (same as --model)");
  cmd->add_option("--budget", o.budget, "seconds of timing at most (default 20)");
  cmd->add_option("--threads", o.threads, "threads per run (0 = all cores)");
  cmd->add_option("--decode-batch", o.decode_batch, "decode shape: sequences (default 4)");
  cmd->add_option("--decode-context", o.decode_context, "decode shape: cached tokens per sequence (default 1024)");
  cmd->add_option("--prefill-len", o.prefill_len, "prefill shape: new tokens of one sequence (default 256)");
  cmd->add_option("--output", o.output, "write the tuning file here (default: $ATTN_TUNE_FILE, else the user's cache folder)");
  cmd->add_flag("--json", o.json, "print the tuning file's JSON instead of the table");
}

int cmd_tune(const TuneOptions& options) {
  ModelOptions m = options.model;
  if (!options.model_arg.empty()) {
    attn::require(m.model.empty(), "--model", m.model, "not given together with a model name argument ('" + options.model_arg + "')");
    m.model = options.model_arg;
  }
  attn::require(m.platform.empty() || m.platform == "cpu", "--platform", m.platform, "cpu or nothing: tune measures this machine");
  const attn::ModelSpec model = load_model(m);

  attn::TuneOptions to;
  to.budget_s = options.budget;
  to.threads = check_threads_option(options.threads);
  to.decode_batch = attn::check_range32("--decode-batch", options.decode_batch, 1, 1024, "sequences");
  to.decode_context = attn::check_range32("--decode-context", options.decode_context, 1, 1 << 20, "tokens");
  to.prefill_len = attn::check_range32("--prefill-len", options.prefill_len, 1, 1 << 16, "tokens");
  if (m.backend != "auto") to.backend = m.backend;
  to.progress = attn::progress_to_stderr();

  // Layers by tuned config, in model order.
  std::vector<attn::LayerConfig> configs;
  std::map<std::string, std::vector<int>> layers_of;
  std::map<std::string, const attn::ModelLayer*> sample_of;
  for (const auto& l : model.layers) {
    if (l.kind != attn::LayerKind::attention || l.attention.is_attention_free) continue;
    const std::string key = attn::tuning_key(l.attention);
    if (layers_of[key].empty()) configs.push_back(l.attention), sample_of[key] = &l;
    layers_of[key].push_back(l.index);
  }
  attn::require(!configs.empty(), "--model", model.name, "a model with attention layers (mixer layers have nothing to tune)");

  const attn::TuningFile fresh = attn::tune(configs, to);
  const std::string active = attn::tuning_file_path();
  const std::string path = attn::save_tuning(fresh, options.output);
  const char* env_file = std::getenv("ATTN_TUNE_FILE");
  if (options.output.empty() && (!env_file || !*env_file))
    std::fprintf(stderr,
                 "note: wrote this machine's default tuning file %s: from now on every selection here (attn, its Python "
                 "module, engines using it) follows these measurements; ATTN_TUNE_FILE=off ignores it, deleting the file "
                 "undoes it, --output or ATTN_TUNE_FILE writes elsewhere\n",
                 path.c_str());

  if (options.json) {
    std::cout << fresh.to_json() << "\n";
    return 0;
  }
  std::printf("tuned %s on %s, %d threads\ndecode: %s; prefill: %s\n", model.name.c_str(), fresh.platform.c_str(), fresh.threads,
              fresh.decode_shape.c_str(), fresh.prefill_shape.c_str());
  for (const auto& tc : fresh.configs) print_config(tc, layers_of[tc.key], *sample_of[tc.key]);
  std::printf("\nwrote %s\n", path.c_str());
  if (path != active) {
    std::printf("the selector reads %s; set ATTN_TUNE_FILE=%s to use this one\n", active.empty() ? "no tuning file" : active.c_str(), path.c_str());
    return 0;
  }
  std::printf("the selector now picks:\n");
  for (const auto& c : configs) {
    const attn::Decision d = attn::select(c);
    std::printf("  layers %s: %s%s, block size %d\n", attn::layer_ranges(layers_of[attn::tuning_key(c)]).c_str(), d.backend.c_str(),
                d.variant.empty() ? "" : (" [" + d.variant + "]").c_str(), d.block_size);
    for (const auto& n : d.notes) std::printf("    %s\n", n.c_str());
  }
  return 0;
}

}  // namespace attn_cli
