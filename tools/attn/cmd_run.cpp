// `attn run`: the model's attention workload on this machine. Every attention layer gets its
// selected backend and its own paged cache; a prefill step then decode steps run through
// write_kv + forward on random activations; the report gives tokens/s, cache memory and a spot
// check of one layer against the reference backend.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include "attn/error.hpp"
#include "attn/registry.hpp"
#include "commands.hpp"
#include "plan.hpp"
#include "workload.hpp"

namespace attn_cli {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

/// The sequences of one layer group: layers of a group share block tables (one KV-cache
/// group in vLLM's terms), each layer has its own cache.
struct GroupState {
  const LayerGroup* group = nullptr;
  std::shared_ptr<const attn::BackendDescriptor> backend;
  int32_t block_size = 0, num_blocks = 0;
  bool causal = true;
  std::unique_ptr<attn::BlockAllocator> alloc;
  std::vector<attn::SequenceBlocks> seqs;
  attn::BatchMetadata md;

  /// Appends `n` tokens to every sequence and builds this step's metadata.
  void advance(int32_t n) {
    std::vector<attn::SequenceSpec> specs;
    for (auto& s : seqs) {
      const int64_t before = s.num_tokens();
      s.append(n);
      specs.push_back({before, n, s.block_ids()});
    }
    md = attn::BatchMetadata::build(specs, block_size, num_blocks, causal);
  }
};

struct LayerState {
  int index = 0;
  GroupState* group = nullptr;
  std::unique_ptr<LayerRunner> runner;
};

/// What the spot check needs: the sample layer's inputs of every step, its last output.
struct Recording {
  int layer = -1;
  std::vector<attn::BatchMetadata> mds;
  std::vector<StepInputs> inputs;
  attn::Buffer last_out;
};

struct PhaseTime {
  int64_t tokens = 0;
  double seconds = 0;
  json to_json() const {
    return {{"tokens", tokens}, {"seconds", seconds}, {"tokens_per_s", seconds > 0 ? double(tokens) / seconds : 0.0}};
  }
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

/// The first attention layer the reference can check (directly or in its oracle form).
int pick_sample_layer(const Plan& plan, const attn::Platform& platform, std::string& why_none) {
  auto ref = attn::Registry::instance().find("reference");
  if (!ref) {
    why_none = "no 'reference' backend registered";
    return -1;
  }
  for (const auto& l : plan.model.layers) {
    if (l.kind != attn::LayerKind::attention) continue;
    auto reasons = attn::check_capabilities(ref->caps, oracle_config(l.attention), platform);
    if (reasons.empty()) return l.index;
    if (why_none.empty()) why_none = "reference cannot serve layer " + std::to_string(l.index) + ": " + reasons[0].to_string();
  }
  if (why_none.empty()) why_none = "the model has no attention layers";
  return -1;
}

json spot_check(const Recording& rec, const LayerState& layer, Rng& rng) {
  auto ref = attn::Registry::instance().find("reference");
  attn::LayerParams p = layer.runner->params();
  p.scale = p.effective_scale();  // the oracle's head_size may differ (MLA); keep the layer's scale
  p.config = oracle_config(p.config);
  LayerRunner oracle(*ref, p, layer.group->num_blocks, layer.group->block_size);
  for (size_t i = 0; i < rec.mds.size(); ++i) oracle.write(rec.mds[i], rec.inputs[i]);
  attn::Buffer out = make_output(p.config, rec.mds.back().num_tokens);
  oracle.forward(rec.mds.back(), rec.inputs.back(), out.view(), rng);
  const Tolerance tol = tolerance_for(layer.runner->params().config);
  const Comparison c = compare(rec.last_out, out, tol);
  json j{{"layer", rec.layer}, {"backend", layer.group->group->decision.backend}, {"reference", "reference"},
         {"max_abs_err", c.max_abs_err}, {"atol", tol.atol}, {"rtol", tol.rtol}, {"passed", c.ok}};
  if (!c.ok) j["first_failure"] = c.first_failure;
  return j;
}

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

int cmd_run(const RunOptions& o) {
  const attn::ModelSpec model = load_model(o.model);
  const attn::SelectOptions sel = select_options(o.model);
  const attn::Platform platform = sel.platform ? *sel.platform : attn::detect_cpu();
  attn::require(platform.detected, "platform", platform.to_string(), "this machine (attn run executes here; use attn plan for other targets)");
  const Plan plan = build_plan(model, sel);
  if (!plan.all_served()) {
    std::cerr << plan_text(plan);
    std::string groups;
    for (const auto& g : plan.groups) {
      if (!g.error.empty()) groups += (groups.empty() ? "" : "; ") + g.error;
    }
    throw attn::Error(groups + " (candidates and their reasons above)");
  }
  if (o.threads > 0) omp_set_num_threads(o.threads);
  Rng rng(o.seed);

  // --- set up: block tables per group, a backend instance and a cache per layer ---
  std::vector<std::unique_ptr<GroupState>> groups;
  std::vector<LayerState> layers;
  int mixer_layers = 0;
  for (const auto& g : plan.groups) {
    if (!g.is_attention()) {
      mixer_layers += int(g.layers.size());
      continue;
    }
    auto gs = std::make_unique<GroupState>();
    gs->group = &g;
    gs->backend = attn::Registry::instance().find(g.decision.backend);
    gs->block_size = g.decision.block_size;
    gs->causal = g.sample.attention.causal();
    const bool decodes = g.sample.attention.attn_type == attn::AttnType::decoder;
    const int64_t tokens = o.prompt_len + (decodes ? o.decode_steps : 0);
    gs->num_blocks = int32_t(int64_t(o.batch) * ((tokens + gs->block_size - 1) / gs->block_size));
    gs->alloc = std::make_unique<attn::BlockAllocator>(gs->num_blocks);
    for (int s = 0; s < o.batch; ++s) gs->seqs.emplace_back(*gs->alloc, gs->block_size);
    groups.push_back(std::move(gs));
  }
  for (const auto& l : model.layers) {
    if (l.kind != attn::LayerKind::attention) continue;
    GroupState* gs = nullptr;
    for (auto& g : groups) {
      for (int i : g->group->layers) if (i == l.index) gs = g.get();
    }
    LayerState ls;
    ls.index = l.index;
    ls.group = gs;
    ls.runner = std::make_unique<LayerRunner>(*gs->backend, layer_params(l, o.threads, rng), gs->num_blocks, gs->block_size);
    layers.push_back(std::move(ls));
  }
  std::string why_no_sample;
  Recording rec;
  rec.layer = pick_sample_layer(plan, platform, why_no_sample);

  // --- one engine step: metadata once per group, then every layer in model order ---
  auto step = [&](int32_t new_tokens, bool decode, PhaseTime& time) {
    for (auto& g : groups) {
      const bool decodes = g->group->sample.attention.attn_type == attn::AttnType::decoder;
      if (!decode || decodes) g->advance(new_tokens);
    }
    for (auto& l : layers) {
      const attn::LayerConfig& cfg = l.runner->params().config;
      if (decode && cfg.attn_type != attn::AttnType::decoder) continue;  // encoders have no decode
      const attn::BatchMetadata& md = l.group->md;
      StepInputs in = random_inputs(cfg, md.num_tokens, rng);  // outside the timed region
      attn::Buffer out = make_output(cfg, md.num_tokens);
      const auto t0 = Clock::now();
      l.runner->write(md, in);
      l.runner->forward(md, in, out.view(), rng);
      time.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
      if (l.index == rec.layer) {
        rec.mds.push_back(md);
        rec.inputs.push_back(std::move(in));
        rec.last_out = std::move(out);
      }
    }
  };

  PhaseTime prefill, decode;
  step(o.prompt_len, false, prefill);
  prefill.tokens = int64_t(o.batch) * o.prompt_len;
  bool any_decoder = false;
  for (auto& g : groups) any_decoder = any_decoder || g->group->sample.attention.attn_type == attn::AttnType::decoder;
  for (int s = 0; any_decoder && s < o.decode_steps; ++s) step(1, true, decode);
  decode.tokens = any_decoder ? int64_t(o.batch) * o.decode_steps : 0;

  std::size_t cache_bytes = 0;
  for (auto& l : layers) cache_bytes += l.runner->cache_bytes();
  json check = nullptr;
  if (rec.layer >= 0) {
    for (auto& l : layers) if (l.index == rec.layer) check = spot_check(rec, l, rng);
  }

  json j{{"model", model.name}, {"architecture", model.architecture}, {"platform", plan.platform},
         {"batch", o.batch}, {"prompt_len", o.prompt_len}, {"decode_steps", any_decoder ? o.decode_steps : 0},
         {"threads", o.threads > 0 ? o.threads : omp_get_max_threads()}, {"seed", o.seed},
         {"attention_layers", layers.size()}, {"mixer_layers_skipped", mixer_layers},
         {"prefill", prefill.to_json()}, {"decode", decode.to_json()}, {"cache_bytes", cache_bytes},
         {"groups", plan_json(plan)["groups"]}, {"spot_check", check}};
  if (check.is_null()) j["spot_check_skipped"] = why_no_sample;
  const bool passed = check.is_null() || check["passed"].get<bool>();

  if (o.json) {
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << plan_text(plan, false) << "\n";
    std::printf("run: batch %d x prompt %d, %d decode steps, %zu attention layers, %d threads\n", o.batch, o.prompt_len,
                j["decode_steps"].get<int>(), layers.size(), j["threads"].get<int>());
    if (mixer_layers) std::printf("  %d mixer layers not run (attn run drives attention layers only)\n", mixer_layers);
    if (layers.empty()) {
      std::printf("  no attention layers: nothing to run\n");
      return 0;
    }
    std::printf("  prefill: %lld tokens in %.3f s -> %.0f tokens/s (write_kv + forward of every attention layer)\n",
                (long long)prefill.tokens, prefill.seconds, j["prefill"]["tokens_per_s"].get<double>());
    if (any_decoder) {
      std::printf("  decode:  %lld tokens in %.3f s -> %.0f tokens/s\n", (long long)decode.tokens, decode.seconds,
                  j["decode"]["tokens_per_s"].get<double>());
    } else {
      std::printf("  decode:  none (encoder-only model)\n");
    }
    std::printf("  KV cache: %s in %zu layer caches\n", mib(double(cache_bytes)).c_str(), layers.size());
    for (auto& g : groups) {
      std::printf("    layers %s: %s, block size %d, %d blocks per layer\n", compact_layers(g->group->layers).c_str(),
                  g->group->decision.backend.c_str(), g->block_size, g->num_blocks);
    }
    if (check.is_null()) {
      std::printf("  spot check: skipped (%s)\n", why_no_sample.c_str());
    } else {
      std::printf("  spot check: layer %d (%s) vs reference: max |err| %.3g (tolerance %.3g + %.3g*|ref|): %s\n",
                  check["layer"].get<int>(), check["backend"].get<std::string>().c_str(), check["max_abs_err"].get<double>(),
                  check["atol"].get<double>(), check["rtol"].get<double>(), passed ? "PASS" : "FAIL");
      if (!passed) std::printf("    first failure %s\n", check["first_failure"].get<std::string>().c_str());
    }
  }
  return passed ? 0 : 1;
}

}  // namespace attn_cli
