// attn: plan, run, check and benchmark attention backends from the command line.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "attn/error.hpp"
#include "attn/limits.hpp"
#include "bench.hpp"
#include "commands.hpp"
#include "options.hpp"

namespace {

void add_model_flags(CLI::App* cmd, attn_cli::ModelOptions& m, bool model_required) {
  auto* opt = cmd->add_option("--model", m.model, "built-in model name or path to a config.json");
  if (model_required) opt->required();
  cmd->add_option("--platform", m.platform, "plan for: cpu, cpu:avx2, cpu:avx512, cuda, cuda:9.0, ... (default: this machine)");
  cmd->add_option("--dtype", m.dtype, "model dtype override (float32, float16, bfloat16)");
  cmd->add_option("--kv-cache-dtype", m.kv_cache_dtype, "KV-cache dtype (auto, fp8, fp8_e4m3, ...)");
  cmd->add_option_function<int64_t>(
      "--block-size", [&m](const int64_t& v) { m.block_size = v; }, "KV block size (default: the chosen backend's preferred size)");
  cmd->add_option("--backend", m.backend, "force this attention backend (\"auto\" = choose)");
  cmd->add_option("--tensor-parallel", m.tensor_parallel,
                  "tensor-parallel ranks: each holds heads / N of every layer (KV heads split, or replicated when fewer than N)");
}

/// An option given with an empty value ('' from a script's unset variable) would otherwise mean
/// the default silently; refuse it, naming the option.
void reject_empty_values(const CLI::App& app) {
  for (const CLI::App* cmd : app.get_subcommands()) {
    for (const CLI::Option* opt : cmd->get_options()) {
      for (const std::string& value : opt->results()) {
        if (value.empty() && opt->get_expected_min() > 0) {
          throw attn::Error(opt->get_name() + "='' invalid: expected a value: " + opt->get_description());
        }
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"attn: choose, explain and run attention backends"};
  app.require_subcommand(1);

  attn_cli::BackendsOptions backends;
  auto* cmd_backends = app.add_subcommand("backends", "every registered backend, its capabilities and whether it loads here");
  cmd_backends->add_option("--platform", backends.platform, "judge loadability for this platform (default: this machine)");
  cmd_backends->add_flag("--json", backends.json, "print JSON");

  attn_cli::PlanOptions plan;
  auto* cmd_plan = app.add_subcommand("plan", "the backend chosen for every layer group of a model, and why not the others");
  add_model_flags(cmd_plan, plan.model, true);
  cmd_plan->add_option("--pipeline-parallel", plan.pipeline_parallel, "pipeline stages: contiguous layer ranges, as vLLM splits them");
  cmd_plan->add_flag("--json", plan.json, "print JSON");

  attn_cli::RunOptions run;
  auto* cmd_run = app.add_subcommand("run", "prefill + decode steps of every layer of a model (attention and mixers) on random activations");
  add_model_flags(cmd_run, run.model, false);
  // Sizes are range-checked after parsing (options.cpp), so errors name the option and attn's limit.
  cmd_run->add_option("--batch", run.batch, "sequences");
  cmd_run->add_option("--prompt-len", run.prompt_len, "prompt tokens per sequence");
  cmd_run->add_option("--decode-steps", run.decode_steps, "decode steps after the prefill");
  cmd_run->add_option("--threads", run.threads, "threads (0 = all cores)");
  cmd_run->add_option("--memory-limit", run.memory_limit,
                      "refuse to run when caches and activations would exceed this (8G, 512M, ...; default: $" +
                          std::string(attn::limits::kMemoryLimitEnv) + ", else 80% of available memory)");
  cmd_run->add_option("--seed", run.seed, "random seed of the activations");
  cmd_run->add_option("--rank", run.rank, "with --tensor-parallel: the rank whose share runs (0..N-1)");
  cmd_run->add_flag("--json", run.json, "print JSON");

  attn_cli::CheckOptions check;
  auto* cmd_check = app.add_subcommand("check", "every available backend against the reference on random inputs");
  cmd_check->add_option("--backend", check.backend, "check only this backend");
  cmd_check->add_option("--seed", check.seed, "random seed");
  cmd_check->add_flag("--json", check.json, "print JSON");

  attn_cli::BenchOptions bench;
  auto* cmd_bench = app.add_subcommand("bench", "cpu_flash on Llama-3.1-8B decode/prefill and gpt-oss-20b sliding-window shapes, against this machine's measured ceilings; per-step planning overhead of a 32-layer decode step");
  cmd_bench->add_flag("--json", bench.json, "print JSON figures");
  cmd_bench->add_option("--filter", bench.filter,
                        "only shapes / figures whose name contains this (mla, mixer, step: those figure sets)");
  cmd_bench->add_flag("--quick", bench.quick, "short sizes, few repeats");
  cmd_bench->add_option("--threads", bench.threads, "threads (0 = all cores)");
  cmd_bench->add_option("--csv", bench.csv_path, "also write CSV here");
  cmd_bench->add_option("--kv-layout", bench.kv_layout, "HND: attention shapes on HND row caches instead of cpu_flash's own layout")
      ->check(CLI::IsMember({"HND"}));
  cmd_bench->add_option("--rounds", bench.rounds,
                        "measure the ceilings and the shapes this many times, one after the other, and report medians "
                        "(fractions are taken within each round): steadier on a machine whose bandwidth drifts")
      ->check(CLI::Range(1, 99));

  attn_cli::TuneOptions tune;
  auto* cmd_tune = app.add_subcommand("tune", "time every valid backend, kernel variant and block size of a model's layers here; the selector then prefers the fastest");
  add_model_flags(cmd_tune, tune.model, false);
  attn_cli::add_tune_flags(cmd_tune, tune);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version end parsing with exit code 0; every real parse error is reported like
    // any other error (exit 1, "error: ..."), not with CLI11's own codes (104-106, ...).
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    std::cerr << "error: " << e.what() << "\nRun with --help for more information.\n";
    return 1;
  }

  try {
    reject_empty_values(app);
    if (*cmd_bench) attn_cli::check_threads_option(bench.threads);
    if (*cmd_backends) return attn_cli::cmd_backends(backends);
    if (*cmd_plan) return attn_cli::cmd_plan(plan);
    if (*cmd_run) return attn_cli::cmd_run(run);
    if (*cmd_check) return attn_cli::cmd_check(check);
    if (*cmd_tune) return attn_cli::cmd_tune(tune);
    if (*cmd_bench) return attn_cli::run_bench(bench);
  } catch (const attn::Error& e) {
    std::fflush(stdout);
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 1;
}
