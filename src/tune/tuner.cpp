// `tune`: every valid backend × variant × block size of each config, timed in interleaved rounds
// on a decode and a prefill shape within a time budget; each choice's fastest run goes into a
// TuningFile. The minimum, not the median: other work only ever adds time (cache eviction,
// preemption of a thread mid-run), so the fastest of several interleaved runs is the least
// disturbed measure of the choice itself.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <set>

#include "attn/error.hpp"
#include "attn/registry.hpp"
#include "attn/selector.hpp"
#include "attn/tune.hpp"
#include "core/log.hpp"
#include "select/measured.hpp"
#include "tune/workload.hpp"
#include "cpu/threads.hpp"

namespace attn {
namespace {

using tune_detail::Shape;
using tune_detail::TimedRun;
using tune_detail::Workload;

// From round kPruneAfter on, choices this much slower than the best (geometric mean over both
// shapes) are not timed again: they cannot win, and the budget is better spent on the close ones.
// Not sooner: one run can be slowed many times over by other work on a busy machine.
constexpr double kPruneFactor = 2.0;
constexpr int kPruneAfter = 5;
// Runs of one choice typically further apart than this: the timings are not to be trusted.
constexpr double kUnstable = 1.5;

/// One choice of one config on both shapes, with its samples.
struct Trial {
  std::size_t config = 0;       // index into the file's configs
  TunedChoice choice;
  std::unique_ptr<TimedRun> runs[2];  // decode, prefill
  std::vector<double> samples[2];
  bool pruned = false;
};

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

double fastest(const std::vector<double>& v) { return v.empty() ? 0 : *std::min_element(v.begin(), v.end()); }

void check_options(const TuneOptions& o) {
  require(o.budget_s > 0 && o.budget_s <= 3600, "budget", o.budget_s, "seconds in (0, 3600]");
  require(o.threads >= 0 && o.threads <= 4096, "threads", o.threads, "0 (all cores) .. 4096");
  require(o.decode_batch >= 1 && o.decode_batch <= 1024, "decode_batch", o.decode_batch, "1 .. 1024 sequences");
  require(o.decode_context >= 1 && o.decode_context <= (1 << 20), "decode_context", o.decode_context, "1 .. 1048576 tokens");
  require(o.prefill_len >= 1 && o.prefill_len <= (1 << 16), "prefill_len", o.prefill_len, "1 .. 65536 tokens");
  require(o.rounds >= 1 && o.rounds <= 100, "rounds", o.rounds, "1 .. 100");
  for (int b : o.block_sizes) require(b >= 1 && b <= 1024, "block_sizes", b, "block sizes in 1 .. 1024");
  if (!o.backend.empty() && !Registry::instance().find(o.backend))
    throw Error("backend='" + o.backend + "' invalid: expected one of " + join(Registry::instance().names()));
}

/// Every valid (backend, variant, block size) of `c`, in priority order, each backend's own variant
/// and block size first (so a budget cut short still times what priority would pick).
std::vector<TunedChoice> choices_for(const LayerConfig& c, const TuneOptions& o, const Platform& p) {
  SelectOptions so;
  so.use_env = false;
  const Decision d = explain(c, so);
  std::vector<TunedChoice> out;
  for (const auto& cand : d.candidates) {
    if (!cand.valid || (!o.backend.empty() && cand.backend != o.backend)) continue;
    auto desc = Registry::instance().find(cand.backend);
    if (!desc->create) continue;  // nothing to time
    std::vector<int> blocks = c.block_size ? std::vector<int>{c.block_size} : o.block_sizes;
    if (!c.block_size) blocks.insert(blocks.begin(), desc->preferred_block_size);
    std::vector<std::string> variants = desc->variants ? desc->variants(p) : std::vector<std::string>{""};
    const std::string own = desc->variant ? desc->variant(p, c) : "";
    std::stable_partition(variants.begin(), variants.end(), [&](const std::string& v) { return v == own; });
    std::set<int> seen;
    for (const auto& v : variants) {
      seen.clear();
      for (int b : blocks)
        if (seen.insert(b).second && detail::block_size_allowed(*desc, c, p, b)) {
          TunedChoice ch;
          ch.backend = cand.backend, ch.variant = v, ch.block_size = b;
          out.push_back(std::move(ch));
        }
    }
  }
  return out;
}

/// Per config: stop timing the choices whose fastest runs so far are far behind the best.
void prune(std::vector<Trial>& trials, std::size_t num_configs) {
  const auto timed = [](const Trial& t) { return !t.samples[0].empty() && !t.samples[1].empty(); };
  for (std::size_t i = 0; i < num_configs; ++i) {
    double best[2] = {INFINITY, INFINITY};
    for (const auto& t : trials)
      if (t.config == i && timed(t)) for (int s = 0; s < 2; ++s) best[s] = std::min(best[s], fastest(t.samples[s]));
    for (auto& t : trials)
      if (t.config == i && timed(t))
        t.pruned = fastest(t.samples[0]) / best[0] * fastest(t.samples[1]) / best[1] > kPruneFactor * kPruneFactor;
  }
}

/// Warns when runs of the same choice varied a lot: the machine was busy, and the fastest run
/// of each choice may be luck rather than the choice.
void warn_if_unstable(const std::vector<Trial>& trials) {
  std::vector<double> spreads;
  for (const auto& t : trials)
    for (const auto& v : t.samples)
      if (v.size() >= 2) spreads.push_back(*std::max_element(v.begin(), v.end()) / fastest(v));
  if (spreads.empty()) return;
  std::nth_element(spreads.begin(), spreads.begin() + spreads.size() / 2, spreads.end());
  const double typical = spreads[spreads.size() / 2];
  if (typical < kUnstable) return;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", typical);
  log_warning(std::string("tune: runs of the same choice typically varied ") + buf +
              "× (other work on this machine?); the measured choices may not hold: tune again when the machine is idle, or "
              "with fewer threads");
}

LayerParams params_for(const LayerConfig& c, const std::string& variant, int threads) {
  LayerParams lp;
  lp.config = c;
  lp.variant = variant;
  lp.num_threads = threads;
  if (c.has_sink) lp.sinks.assign(std::size_t(c.num_heads), 0.5f);
  return lp;
}

std::string shape_text(const Shape& s) {
  return std::to_string(s.query_lens.size()) + " sequence(s) × " + std::to_string(s.query_lens[0]) + " new token(s) over " +
         std::to_string(s.context_lens[0]) + " cached";
}

}  // namespace

TuningFile tune(const std::vector<LayerConfig>& configs, const TuneOptions& o) {
  check_options(o);
  const Platform& p = detect_cpu();
  const Shape shapes[2] = {{"decode", std::vector<int64_t>(std::size_t(o.decode_batch), o.decode_context),
                            std::vector<int64_t>(std::size_t(o.decode_batch), 1)},
                           {"prefill", {0}, {o.prefill_len}}};
  TuningFile file;
  file.attn_version = version();
  file.fingerprint = tuning_fingerprint(p);
  file.platform = p.to_string();
  file.threads = cpu::team_size(o.threads);
  file.decode_shape = shape_text(shapes[0]);
  file.prefill_shape = shape_text(shapes[1]);

  std::vector<LayerConfig> distinct;
  for (const auto& c : configs) {
    if (c.is_attention_free) continue;
    c.validate();
    if (std::none_of(distinct.begin(), distinct.end(), [&](const LayerConfig& x) { return tuning_key(x) == tuning_key(c); }))
      distinct.push_back(c);
  }
  std::vector<Trial> trials;
  for (std::size_t i = 0; i < distinct.size(); ++i) {
    file.configs.push_back({tuning_key(distinct[i]), layer_config_json(distinct[i]), {}});
    for (auto& ch : choices_for(distinct[i], o, p)) trials.push_back({i, std::move(ch), {}, {}, false});
  }

  // Workloads are shared by the variants of one (config, shape, backend, block size).
  std::map<std::tuple<std::size_t, int, std::string, int>, std::unique_ptr<Workload>> workloads;
  Workspace ws;
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  TuneProgress progress{0, int(trials.size()) * 2 * o.rounds, 0, o.budget_s, ""};
  bool out_of_time = false;
  for (int round = 0; round < o.rounds && !out_of_time; ++round) {
    for (int s = 0; s < 2 && !out_of_time; ++s) {
      for (auto& t : trials) {
        if (t.pruned || !t.choice.error.empty()) { ++progress.done; continue; }
        if (elapsed() > o.budget_s) { out_of_time = true; break; }
        const TunedChoice& ch = t.choice;
        progress.elapsed_s = elapsed();
        progress.current = ch.backend + (ch.variant.empty() ? "" : "[" + ch.variant + "]") + " block " +
                           std::to_string(ch.block_size) + " " + shapes[s].name;
        if (o.progress) o.progress(progress);
        try {
          if (!t.runs[s]) {
            auto& w = workloads[{t.config, s, ch.backend, ch.block_size}];
            if (!w) w = std::make_unique<Workload>(distinct[t.config], shapes[s], *Registry::instance().find(ch.backend), ch.block_size);
            t.runs[s] = std::make_unique<TimedRun>(params_for(distinct[t.config], ch.variant, o.threads), ch.backend, *w);
          }
          t.samples[s].push_back(t.runs[s]->run_once(ws));
        } catch (const Error& e) {
          t.choice.error = e.what();
        }
        ++progress.done;
      }
    }
    if (round + 1 >= kPruneAfter) prune(trials, distinct.size());
  }
  progress.elapsed_s = elapsed();
  progress.current = out_of_time ? "time budget reached" : "done";
  progress.finished = true;
  if (o.progress) o.progress(progress);
  warn_if_unstable(trials);  // after the progress line is finished

  for (auto& t : trials) {
    if (t.choice.error.empty() && (t.samples[0].empty() || t.samples[1].empty())) t.choice.error = "not timed: the time budget ran out";
    if (t.choice.error.empty()) t.choice.decode_us = fastest(t.samples[0]) * 1e6, t.choice.prefill_us = fastest(t.samples[1]) * 1e6;
    file.configs[t.config].choices.push_back(std::move(t.choice));
  }
  file.tuned_at = utc_now();
  return file;
}

std::function<void(const TuneProgress&)> progress_to_stderr() {
  return [](const TuneProgress& p) {
    std::fprintf(stderr, "\r%-100s%s", progress_line(p).c_str(), p.finished ? "\n" : "");
    std::fflush(stderr);
  };
}

std::string progress_line(const TuneProgress& p) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "[%4d/%d] %5.1fs of %gs  ", p.done, p.total, p.elapsed_s, p.budget_s);
  return buf + p.current;
}

}  // namespace attn
