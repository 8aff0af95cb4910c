// Measured selection: picks the fastest valid choice a tuning file recorded for a config.
#include "select/measured.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "attn/registry.hpp"

namespace attn::detail {
namespace {

// Choices whose score is within this factor of the best are ties (interleaved medians on a busy
// machine still move by a few percent); ties go to priority.
constexpr double kTie = 1.03;

struct Valid {
  const TunedChoice* choice;
  int priority;
  bool own_variant, own_block;  // the backend's own choice on this machine
  double score = 0;             // geometric mean of decode and prefill time over the best of each
};

std::string label(const TunedChoice& c) {
  return c.backend + (c.variant.empty() ? "" : "[" + c.variant + "]") + " block " + std::to_string(c.block_size);
}

std::string ratio(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f×", x);
  return buf;
}

}  // namespace

bool block_size_allowed(const BackendDescriptor& desc, const LayerConfig& config, const Platform& p, int block_size) {
  // The backend serves `config` already; of the generic checks only the block-size rule reads it.
  if (block_size <= 0 || !desc.caps.block_sizes.allows(block_size)) return false;
  if (!desc.extra_checks) return true;
  LayerConfig c = config;
  c.block_size = block_size;
  return desc.extra_checks(c, p).empty();
}

std::optional<MeasuredPick> measured_pick(const Registry& reg, const TuningFile& tuning, const LayerConfig& config,
                                          const std::vector<Candidate>& candidates, const Platform& p) {
  const TunedConfig* entry = tuning.find(config);
  if (!entry) return std::nullopt;
  // What each valid backend offers here, looked up once per backend rather than per choice.
  struct Offer {
    const Candidate* candidate;
    std::shared_ptr<const BackendDescriptor> desc;
    std::vector<std::string> variants;
    std::string own_variant;
  };
  std::vector<Offer> offers;
  for (const auto& cand : candidates) {
    if (!cand.valid) continue;
    auto desc = reg.find(cand.backend);
    if (!desc) continue;
    offers.push_back({&cand, desc, desc->variants ? desc->variants(p) : std::vector<std::string>{},
                      desc->variant ? desc->variant(p, config) : ""});
  }
  std::vector<Valid> valid;
  for (const auto& ch : entry->choices) {
    if (!ch.measured()) continue;
    auto o = std::find_if(offers.begin(), offers.end(), [&](const Offer& x) { return x.candidate->backend == ch.backend; });
    if (o == offers.end()) continue;
    const bool offered = o->desc->variants ? std::find(o->variants.begin(), o->variants.end(), ch.variant) != o->variants.end()
                                           : ch.variant.empty();
    if (!offered) continue;
    if (config.block_size ? ch.block_size != config.block_size : !block_size_allowed(*o->desc, config, p, ch.block_size)) continue;
    valid.push_back({&ch, o->candidate->priority, ch.variant.empty() || ch.variant == o->own_variant,
                     ch.block_size == (config.block_size ? config.block_size : o->desc->preferred_block_size)});
  }
  if (valid.empty()) return std::nullopt;

  double best_decode = valid[0].choice->decode_us, best_prefill = valid[0].choice->prefill_us;
  for (const auto& v : valid) best_decode = std::min(best_decode, v.choice->decode_us), best_prefill = std::min(best_prefill, v.choice->prefill_us);
  double best_score = INFINITY;
  for (auto& v : valid) {
    v.score = std::sqrt(v.choice->decode_us / best_decode * v.choice->prefill_us / best_prefill);
    best_score = std::min(best_score, v.score);
  }
  const auto rank = [](const Valid& v) { return std::make_tuple(v.priority, !v.own_variant, !v.own_block, v.score); };
  const Valid* pick = nullptr;
  for (const auto& v : valid)
    if (v.score <= best_score * kTie && (!pick || rank(v) < rank(*pick))) pick = &v;

  // What priority alone would have run: the first valid backend, its own variant and block size.
  const Valid* priority_choice = nullptr;
  for (const auto& v : valid)
    if (v.choice->backend == offers.front().candidate->backend && v.own_variant && v.own_block) priority_choice = &v;

  const TunedChoice& c = *pick->choice;
  const std::string when = "tuned " + tuning.tuned_at.substr(0, 10);
  std::string note;
  if (priority_choice == pick) {
    note = "measured: " + label(c) + " is the priority choice and the fastest (or within " +
           std::to_string(int(std::lround((kTie - 1) * 100))) + "%) of " + std::to_string(valid.size()) + " timed choices, " + when;
  } else if (priority_choice) {
    const TunedChoice& d = *priority_choice->choice;
    note = "measured " + ratio(d.decode_us / c.decode_us) + " faster than " + label(d) + " on decode, " +
           ratio(d.prefill_us / c.prefill_us) + " on prefill; " + when;
  } else {
    note = "measured fastest of " + std::to_string(valid.size()) + " timed choices (the priority choice was not timed), " + when;
  }
  return MeasuredPick{c.backend, c.variant, c.block_size, std::move(note)};
}

}  // namespace attn::detail
