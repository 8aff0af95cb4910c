// `attn run`: every layer of the model on this machine. Attention layers get their selected
// backend and their own paged cache (write_kv + forward); Mamba-family mixer layers get the
// select_mamba backend and their own state cache (one slot per sequence). A prefill step then
// decode steps run on random activations, layer by layer in model order; the report gives time
// and tokens/s per layer kind, KV-cache and state-cache memory, and spot checks of one attention
// layer against the reference and of one mixer layer against its sequential recurrence.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include "attn/limits.hpp"
#include "attention_check.hpp"
#include "attn/checked.hpp"
#include "attn/error.hpp"
#include "attn/mamba.hpp"
#include "attn/registry.hpp"
#include "commands.hpp"
#include "mixer_run.hpp"
#include "options.hpp"
#include "plan.hpp"
#include "run_memory.hpp"
#include "workload.hpp"

namespace attn_cli {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

/// The sequences of one attention layer group: layers of a group share block tables (one
/// KV-cache group in vLLM's terms), each layer has its own cache.
struct GroupState {
  const LayerGroup* group = nullptr;
  std::shared_ptr<const attn::BackendDescriptor> backend;
  int32_t block_size = 0, num_blocks = 0;
  bool causal = true;
  std::unique_ptr<attn::BlockAllocator> alloc;
  std::vector<attn::SequenceBlocks> seqs;
  attn::BatchMetadata md;
  std::optional<attn::StepPlans> plans;  // this step's, one per distinct layer config
  std::string prefill_form, decode_form;  // MLA: the form each phase ran

  /// This step's plan for `layer`: made by the first layer of each config, shared by the rest.
  const attn::StepPlan& plan_for(LayerRunner& layer) { return plans->for_layer(layer.layer(), layer.cache().spec()); }

  bool decodes() const { return group->sample.attention.attn_type == attn::AttnType::decoder; }
  /// Appends `n` tokens to every sequence and builds this step's metadata.
  void advance(int32_t n) {
    std::vector<attn::SequenceSpec> specs;
    for (auto& s : seqs) {
      const int64_t before = s.num_tokens();
      s.append(n);
      specs.push_back({before, n, s.block_ids()});
    }
    md = attn::BatchMetadata::build(specs, block_size, num_blocks, causal);
    plans.emplace(md);
  }
};

/// One layer of the model, attention or mixer.
struct LayerState {
  int index = 0;
  GroupState* group = nullptr;           // attention
  std::unique_ptr<LayerRunner> runner;   // attention
  const LayerGroup* mixer_group = nullptr;
  std::unique_ptr<MixerRunner> mixer;    // mixer
};

struct PhaseTime {
  int64_t tokens = 0;
  double seconds = 0;
  double plan_seconds = 0;  // planning once per step (included in seconds)
  json to_json() const {
    json j{{"tokens", tokens}, {"seconds", seconds}, {"tokens_per_s", seconds > 0 ? double(tokens) / seconds : 0.0}};
    if (plan_seconds > 0) j["plan_seconds"] = plan_seconds;
    return j;
  }
};

/// Time of one layer kind in both phases.
struct KindTime {
  int layers = 0;
  PhaseTime prefill, decode;
  json to_json() const { return {{"layers", layers}, {"prefill", prefill.to_json()}, {"decode", decode.to_json()}}; }
};

attn::LayerParams layer_params(const attn::ModelLayer& layer, int threads, Rng& rng) {
  attn::LayerParams p;
  p.config = layer.attention;
  p.scale = layer.softmax_scale;
  p.num_threads = threads;
  if (p.config.has_sink) {
    for (int h = 0; h < p.config.num_heads; ++h) p.sinks.push_back(rng.uniform(-1.0f, 1.0f));
  }
  return p;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

void print_check(const char* what, const json& c) {
  std::printf("  %s: layer %d (%s) vs %s: max |err| %.3g (tolerance %.3g + %.3g*|ref|): %s\n", what, c["layer"].get<int>(),
              c["backend"].get<std::string>().c_str(), c["reference"].get<std::string>().c_str(),
              c["max_abs_err"].get<double>(), c["atol"].get<double>(), c["rtol"].get<double>(),
              c["passed"].get<bool>() ? "PASS" : "FAIL");
  if (!c["passed"].get<bool>()) std::printf("    first failure %s\n", c["first_failure"].get<std::string>().c_str());
}

void print_phase(const char* name, const PhaseTime& total, const KindTime& attention, const KindTime& mixer, bool decode) {
  std::printf("  %-8s %lld tokens in %.3f s -> %.0f tokens/s\n", (std::string(name) + ":").c_str(), (long long)total.tokens, total.seconds,
              total.to_json()["tokens_per_s"].get<double>());
  for (const KindTime* k : {&attention, &mixer}) {
    if (!k->layers) continue;
    const PhaseTime& t = decode ? k->decode : k->prefill;
    const bool attn_kind = k == &attention;
    std::printf("    %-9s %3d layers: %.3f s -> %.0f tokens/s (%s)\n", attn_kind ? "attention" : "mixer", k->layers, t.seconds,
                t.to_json()["tokens_per_s"].get<double>(), attn_kind ? "plan once per step, write_kv + attend per layer" : "plan once per step, conv + scan per layer, state in place");
    std::printf("      of which planning: %.4f s (%.2f %%)\n", t.plan_seconds, t.seconds > 0 ? 100.0 * t.plan_seconds / t.seconds : 0.0);
  }
}

}  // namespace

int cmd_run(const RunOptions& o) {
  const RunShape shape = check_run_options(o);
  const attn::MemoryBudget budget = attn::memory_budget("--memory-limit", o.memory_limit);
  const attn::ModelSpec whole_model = load_model(o.model);
  const attn::SelectOptions sel = select_options(o.model);
  const attn::Platform platform = sel.platform ? *sel.platform : attn::detect_cpu();
  attn::require(platform.detected, "platform", platform.to_string(), "this machine (attn run executes here; use attn plan for other targets)");
  const Parallelism parallel = parallelism(o.model.tensor_parallel, 1, whole_model);
  attn::check_range("--rank", o.rank, 0, parallel.tensor - 1, "a rank of --tensor-parallel " + std::to_string(parallel.tensor));
  const Plan plan = build_plan(whole_model, sel, parallel);
  const attn::ModelSpec& model = plan.rank_model;  // the rank's share of every layer is what runs
  if (!plan.all_served()) {
    std::cerr << plan_text(plan);
    std::string groups;
    for (const auto& g : plan.groups) {
      if (!g.error.empty()) groups += (groups.empty() ? "" : "; ") + g.error;
    }
    throw attn::Error(groups + " (candidates and their reasons above)");
  }
  if (shape.threads > 0) omp_set_num_threads(shape.threads);
  Rng rng(o.seed);

  // --- sizes of every cache, then the whole run against the memory budget, then allocation ---
  RunMemory memory(shape);
  std::vector<std::unique_ptr<GroupState>> groups;
  for (const auto& g : plan.groups) {
    if (!g.is_attention()) {
      memory.add_mixer_group(attn::MixerConfig::from_dims(g.sample.mixer, g.sample.mixer_dims), int(g.layers.size()));
      continue;
    }
    auto gs = std::make_unique<GroupState>();
    gs->group = &g;
    gs->backend = attn::Registry::instance().find(g.decision.backend);
    gs->block_size = g.decision.block_size;
    gs->causal = g.sample.attention.causal();
    gs->num_blocks = blocks_per_layer(shape, gs->decodes() ? shape.tokens_per_seq : shape.prompt_len, gs->block_size);
    memory.add_attention_group(*gs->backend, g.sample, int(g.layers.size()), gs->num_blocks, gs->block_size);
    groups.push_back(std::move(gs));
  }
  memory.check(budget);
  for (auto& gs : groups) {
    gs->alloc = std::make_unique<attn::BlockAllocator>(gs->num_blocks);
    for (int s = 0; s < shape.batch; ++s) gs->seqs.emplace_back(*gs->alloc, gs->block_size);
  }
  MixerSequences mixer_seqs;
  mixer_seqs.num_seqs = shape.batch;
  std::vector<std::shared_ptr<const attn::MixerPlan>> mixer_plans;  // this step's, one per distinct mixer layer kind
  auto mixer_plan_for = [&](const MixerRunner& layer) -> const attn::MixerPlan& {
    for (const auto& p : mixer_plans)
      if (layer.shares_plan(*p)) return *p;
    mixer_plans.push_back(layer.plan(mixer_seqs.md));
    return *mixer_plans.back();
  };
  std::vector<LayerState> layers;
  KindTime attention_time, mixer_time;
  for (const auto& l : model.layers) {
    LayerState ls;
    ls.index = l.index;
    const LayerGroup& g = plan.group_of(l.index);
    if (l.kind == attn::LayerKind::mixer) {
      const attn::MixerConfig mc = attn::MixerConfig::from_dims(l.mixer, l.mixer_dims);
      ls.mixer_group = &g;
      ls.mixer = std::make_unique<MixerRunner>(g.decision.backend, random_mixer_params(mc, shape.threads, rng), shape.batch);
      ++mixer_time.layers;
    } else {
      for (auto& gs : groups) if (gs->group == &g) ls.group = gs.get();
      attn::LayerParams params = layer_params(l, shape.threads, rng);
      if (g.decision.tuned) params.variant = g.decision.variant;  // the measured fastest kernel variant
      ls.runner = std::make_unique<LayerRunner>(*ls.group->backend, params, ls.group->num_blocks, ls.group->block_size);
      ls.runner->use_random_up_projections(rng);  // MLA: lets long prefills run the expanded form
      ++attention_time.layers;
    }
    layers.push_back(std::move(ls));
  }
  std::string why_no_sample;
  AttentionRecording rec;
  rec.layer = pick_sample_layer(plan, platform, why_no_sample);
  MixerRecording mixer_rec;
  for (const auto& l : layers) {
    if (l.mixer && mixer_rec.layer < 0) mixer_rec.layer = l.index;
  }

  // --- one engine step: metadata once per group, plans once per group and config, then every
  // layer in model order (one workspace serves them all: layers run one after another) ---
  attn::Workspace workspace;
  auto step = [&](int32_t new_tokens, bool decode) {
    for (auto& g : groups) {
      if (!decode || g->decodes()) g->advance(new_tokens);
    }
    if (mixer_time.layers) mixer_seqs.advance(new_tokens);
    mixer_plans.clear();
    for (auto& l : layers) {
      if (l.mixer) {
        const attn::MixerConfig& mc = l.mixer->params().config;
        MixerStepInputs in = random_mixer_inputs(mc, mixer_seqs.md.num_tokens, rng);  // outside the timed region
        attn::Buffer out = make_mixer_output(mc, mixer_seqs.md.num_tokens);
        PhaseTime& time = decode ? mixer_time.decode : mixer_time.prefill;
        const auto tp = Clock::now();
        const attn::MixerPlan& mixer_plan = mixer_plan_for(*l.mixer);
        const double plan_s = seconds_since(tp);
        time.plan_seconds += plan_s, time.seconds += plan_s;
        const auto t0 = Clock::now();
        l.mixer->run(mixer_plan, in, out.view(), &workspace);
        time.seconds += seconds_since(t0);
        if (l.index == mixer_rec.layer) {
          mixer_rec.mds.push_back(mixer_seqs.md);
          mixer_rec.inputs.push_back(std::move(in));
          mixer_rec.outputs.push_back(std::move(out));
        }
        continue;
      }
      const attn::LayerConfig& cfg = l.runner->params().config;
      if (decode && cfg.attn_type != attn::AttnType::decoder) continue;  // encoders have no decode
      const attn::BatchMetadata& md = l.group->md;
      PhaseTime& time = decode ? attention_time.decode : attention_time.prefill;
      const auto tp = Clock::now();
      const attn::StepPlan& step_plan = l.group->plan_for(*l.runner);
      const double plan_s = seconds_since(tp);
      time.plan_seconds += plan_s, time.seconds += plan_s;
      const bool expanded = l.runner->expanded(step_plan);
      StepInputs in = random_inputs(cfg, md.num_tokens, rng, expanded);  // outside the timed region
      attn::Buffer out = make_output(cfg, md.num_tokens, expanded);
      const auto t0 = Clock::now();
      const attn::RunResult ran = l.runner->run(step_plan, in, out.view(), rng, /*write_new_kv=*/true, &workspace);
      time.seconds += seconds_since(t0);
      if (!ran.form.empty()) (decode ? l.group->decode_form : l.group->prefill_form) = std::string(ran.form);
      if (l.index == rec.layer) rec.record(md, std::move(in), std::move(out), expanded);
    }
  };

  bool any_decoder = mixer_time.layers > 0;  // mixers are causal decoder layers
  for (auto& g : groups) any_decoder = any_decoder || g->decodes();
  const int decode_steps = any_decoder ? shape.decode_steps : 0;
  step(shape.prompt_len, false);
  for (int s = 0; s < decode_steps; ++s) step(1, true);
  const int64_t prefill_tokens = int64_t(shape.batch) * shape.prompt_len, decode_tokens = int64_t(shape.batch) * decode_steps;
  for (KindTime* k : {&attention_time, &mixer_time}) {
    k->prefill.tokens = k->layers ? prefill_tokens : 0;
    k->decode.tokens = k->layers ? decode_tokens : 0;
  }
  const PhaseTime prefill{prefill_tokens, attention_time.prefill.seconds + mixer_time.prefill.seconds};
  const PhaseTime decode{decode_tokens, attention_time.decode.seconds + mixer_time.decode.seconds};

  std::size_t kv_bytes = 0, state_bytes = 0;
  for (auto& l : layers) {
    if (l.runner) kv_bytes += l.runner->cache_bytes();
    if (l.mixer) state_bytes += l.mixer->state_bytes();
  }
  json check = nullptr, mla_check = nullptr, mixer_check = nullptr;
  for (auto& l : layers) {
    if (l.index == rec.layer) {
      check = spot_check(rec, *l.runner, l.group->group->decision.backend, rng);
      mla_check = expanded_check(rec, *l.runner, l.group->group->decision.backend, rng);
    }
    if (l.index == mixer_rec.layer) mixer_check = mixer_spot_check(mixer_rec, *l.mixer);
  }

  json groups_json = plan_json(plan)["groups"];
  for (std::size_t i = 0; i < plan.groups.size(); ++i) {
    const LayerGroup& g = plan.groups[i];
    json& gj = groups_json[i];
    for (auto& gs : groups) {
      if (gs->group != &g) continue;
      gj["num_blocks_per_layer"] = gs->num_blocks;
      if (!gs->prefill_form.empty()) gj["mla_form"] = {{"prefill", gs->prefill_form}, {"decode", gs->decode_form}};
    }
    for (auto& l : layers) {
      if (l.mixer && l.mixer_group == &g) {
        gj["state_slots"] = shape.batch;
        gj["state_bytes_per_layer"] = l.mixer->state_bytes();
        gj["variant"] = l.mixer->variant();
        break;
      }
    }
  }

  json j{{"model", model.name}, {"architecture", model.architecture}, {"platform", plan.platform},
         {"tensor_parallel", parallel.tensor}, {"rank", o.rank},
         {"batch", shape.batch}, {"prompt_len", shape.prompt_len}, {"decode_steps", decode_steps},
         {"threads", attn::team_size(shape.threads)}, {"seed", o.seed},
         {"attention_layers", attention_time.layers}, {"mixer_layers", mixer_time.layers},
         {"prefill", prefill.to_json()}, {"decode", decode.to_json()},
         {"by_kind", {{"attention", attention_time.to_json()}, {"mixer", mixer_time.to_json()}}},
         {"kv_cache_bytes", kv_bytes}, {"state_cache_bytes", state_bytes},
         {"memory", {{"estimated_bytes", memory.total()}, {"estimated_kv_cache_bytes", memory.kv_cache_bytes()},
                     {"estimated_state_cache_bytes", memory.state_cache_bytes()}, {"budget_bytes", budget.bytes},
                     {"budget_source", budget.source}}},
         {"groups", groups_json}, {"spot_check", check}, {"mixer_spot_check", mixer_check}};
  if (rec.layer < 0) j["spot_check_skipped"] = why_no_sample;
  if (!mla_check.is_null()) j["mla_expanded_check"] = mla_check;
  bool passed = true;
  for (const json* c : {&check, &mla_check, &mixer_check}) passed = passed && (c->is_null() || (*c)["passed"].get<bool>());

  if (o.json) {
    std::cout << j.dump(2) << "\n";
    return passed ? 0 : 1;
  }
  std::cout << plan_text(plan, false) << "\n";
  std::printf("run: batch %d x prompt %d, %d decode steps, %d attention + %d mixer layers, %d threads\n", shape.batch,
              shape.prompt_len, decode_steps, attention_time.layers, mixer_time.layers, j["threads"].get<int>());
  if (parallel.tensor > 1) {
    std::printf("  tensor-parallel rank %lld of %d: this rank's share of every layer (the shapes above)\n", (long long)o.rank,
                parallel.tensor);
  }
  if (layers.empty()) {
    std::printf("  no layers: nothing to run\n");
    return 0;
  }
  print_phase("prefill", prefill, attention_time, mixer_time, false);
  if (any_decoder) {
    print_phase("decode", decode, attention_time, mixer_time, true);
  } else {
    std::printf("  decode:  none (encoder-only model)\n");
  }
  if (attention_time.layers) std::printf("  KV cache: %s in %d layer caches\n", mib(double(kv_bytes)).c_str(), attention_time.layers);
  std::printf("  memory: %s estimated before allocation, budget %s (%s)\n", attn::format_bytes(uint64_t(memory.total())).c_str(),
              attn::format_bytes(budget.bytes).c_str(), budget.source.c_str());
  if (mixer_time.layers) {
    std::printf("  mixer state cache: %s in %d layer caches (one slot per sequence)\n", mib(double(state_bytes)).c_str(),
                mixer_time.layers);
  }
  for (std::size_t i = 0; i < plan.groups.size(); ++i) {
    const LayerGroup& g = plan.groups[i];
    const json& gj = groups_json[i];
    std::printf("    layers %s: %s", g.layer_ranges.c_str(), g.decision.backend.c_str());
    if (g.is_attention()) {
      std::printf(", block size %d, %d blocks per layer", g.decision.block_size, gj["num_blocks_per_layer"].get<int>());
      if (gj.contains("mla_form")) {
        std::printf(", MLA form: prefill %s, decode %s", gj["mla_form"]["prefill"].get<std::string>().c_str(),
                    any_decoder ? gj["mla_form"]["decode"].get<std::string>().c_str() : "-");
      }
    } else {
      std::printf(" [%s], %s state per layer", gj["variant"].get<std::string>().c_str(),
                  mib(gj["state_bytes_per_layer"].get<double>()).c_str());
    }
    std::printf("\n");
  }
  if (check.is_null()) {
    std::printf("  spot check: skipped (%s)\n", rec.layer < 0 ? why_no_sample.c_str() : "no absorbed-form step ran");
  } else {
    print_check("spot check", check);
  }
  if (!mla_check.is_null()) print_check("MLA expanded-form check", mla_check);
  if (!mixer_check.is_null()) {
    print_check("mixer spot check", mixer_check);
    std::printf("    final states: max |err| %.3g over %d slots\n", mixer_check["state_max_abs_err"].get<double>(), shape.batch);
  }
  return passed ? 0 : 1;
}

}  // namespace attn_cli
