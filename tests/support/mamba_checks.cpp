// Shared conformance drivers for the mixer backends.
#include "support/mamba_checks.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>

namespace attn::test {

Buffer poisoned_output(const MixerConfig& c, int64_t T) {
  Buffer out(DType::float32, c.out_shape(T));
  std::fill_n(static_cast<float*>(out.data()), out.bytes() / 4, NAN);
  return out;
}

std::vector<SmallMixer> small_mixers() {
  return {
      {"mamba1", MixerConfig::from_dims(MambaType::mamba1, {{"d_inner", 40}, {"d_state", 8}, {"d_conv", 4}})},
      {"mamba2", MixerConfig::from_dims(MambaType::mamba2,
                                        {{"num_heads", 4}, {"head_dim", 12}, {"d_state", 16}, {"n_groups", 2}, {"d_conv", 4}})},
      {"short_conv", MixerConfig::from_dims(MambaType::short_conv, {{"d_inner", 24}, {"d_conv", 3}})},
      {"linear", MixerConfig::from_dims(MambaType::linear_attention, {{"num_heads", 3}, {"head_k_dim", 16}, {"head_v_dim", 12}})},
      {"gdn", MixerConfig::from_dims(MambaType::gdn_attention,
                                     {{"num_heads", 4}, {"num_k_heads", 2}, {"head_k_dim", 16}, {"head_v_dim", 12}, {"d_conv", 4}})},
  };
}

namespace {

void merge(MixerCheck& r, const MixerCompare& c, const std::string& context) {
  r.worst_ratio = std::max(r.worst_ratio, c.worst_ratio);
  if (!c.ok && r.ok) {
    r.ok = false;
    r.message = context + ": " + c.message;
  }
}

void compare_slot(MixerCheck& r, const MambaStateCache& cache, const RefMixerState& ref, int32_t slot,
                  const std::string& context) {
  const Tolerance tol = mixer_tolerance();
  if (cache.conv_slot_floats())
    merge(r, compare_values(cache.conv_slot(slot), ref.conv[slot], tol, "conv_state[" + std::to_string(slot) + "]"), context);
  if (cache.ssm_slot_floats())
    merge(r, compare_values(cache.ssm_slot(slot), ref.ssm[slot], tol, "ssm_state[" + std::to_string(slot) + "]"), context);
}

}  // namespace

MixerCheck check_mixer_batch(const std::string& backend, const MixerConfig& config, const std::vector<int32_t>& lens,
                             uint64_t seed, int chunk_size) {
  std::ostringstream ctx;
  ctx << backend << " " << config.to_string() << " lens=[";
  for (std::size_t i = 0; i < lens.size(); ++i) ctx << (i ? "," : "") << lens[i];
  ctx << "] chunk=" << chunk_size << " seed=" << seed;
  std::mt19937_64 rng(seed);
  const int32_t num_slots = int32_t(lens.size()) + 2;
  std::vector<int32_t> slots(static_cast<std::size_t>(num_slots), 0);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(lens.size());
  std::vector<uint8_t> init(lens.size());
  for (std::size_t s = 0; s < lens.size(); ++s) init[s] = uint8_t(s % 2);

  MixerParams params = random_mixer_params(config, seed + 1);
  params.chunk_size = chunk_size;
  auto impl = create_mixer(backend, params);
  const MixerBatch md = MixerBatch::build(lens, slots, init, num_slots);
  MambaStateCache cache(config, num_slots);
  cache.fill(NAN);  // spare slots and fresh (init = 0) sequences must never read it
  for (std::size_t s = 0; s < lens.size(); ++s) {
    if (!init[s]) continue;
    MambaStateCache one(config, 1);
    randomize_states(one, seed + 10 + s);
    if (cache.conv_slot_floats()) std::copy_n(one.conv_slot(0), cache.conv_slot_floats(), cache.conv_slot(slots[s]));
    if (cache.ssm_slot_floats()) std::copy_n(one.ssm_slot(0), cache.ssm_slot_floats(), cache.ssm_slot(slots[s]));
  }
  RefMixerState ref = ref_state_from(cache);
  const MixerData data = random_mixer_inputs(config, md.num_tokens, seed + 2);
  Buffer out = poisoned_output(config, md.num_tokens);
  impl->forward(data.inputs(), cache, md, out.view());
  const std::vector<double> want = reference_mixer(params, data.inputs(), ref, md);

  MixerCheck r;
  merge(r, compare_values(static_cast<const float*>(out.data()), want, mixer_tolerance(), "out"), ctx.str());
  for (int32_t slot = 0; slot < num_slots; ++slot) {
    const bool used = std::find(slots.begin(), slots.end(), slot) != slots.end();
    if (used) {
      compare_slot(r, cache, ref, slot, ctx.str());
      continue;
    }
    bool poisoned = true;  // untouched spare slot: still all NaN
    for (int64_t i = 0; i < cache.conv_slot_floats(); ++i) poisoned &= std::isnan(cache.conv_slot(slot)[i]);
    for (int64_t i = 0; i < cache.ssm_slot_floats(); ++i) poisoned &= std::isnan(cache.ssm_slot(slot)[i]);
    if (!poisoned && r.ok) {
      r.ok = false;
      r.message = ctx.str() + ": spare slot " + std::to_string(slot) + " was written";
    }
  }
  return r;
}

MixerCheck check_mixer_split(const std::string& backend, const MixerConfig& config, int total,
                             const std::vector<int>& cuts, uint64_t seed, int chunk_size) {
  std::ostringstream ctx;
  ctx << backend << " " << config.to_string() << " total=" << total << " cuts=[";
  for (std::size_t i = 0; i < cuts.size(); ++i) ctx << (i ? "," : "") << cuts[i];
  ctx << "] chunk=" << chunk_size << " seed=" << seed;
  MixerParams params = random_mixer_params(config, seed + 1);
  params.chunk_size = chunk_size;
  auto impl = create_mixer(backend, params);
  const MixerData data = random_mixer_inputs(config, total, seed + 2);

  MambaStateCache initial(config, 1);
  randomize_states(initial, seed + 3);
  RefMixerState ref = ref_state_from(initial);
  const MixerBatch whole_md = MixerBatch::build({total}, {0}, {1}, 1);
  const std::vector<double> want = reference_mixer(params, data.inputs(), ref, whole_md);

  MixerCheck r;
  // One long prefill.
  MambaStateCache whole(config, 1);
  randomize_states(whole, seed + 3);
  Buffer out = poisoned_output(config, total);
  impl->forward(data.inputs(), whole, whole_md, out.view());
  merge(r, compare_values(static_cast<const float*>(out.data()), want, mixer_tolerance(), "out (one prefill)"), ctx.str());
  compare_slot(r, whole, ref, 0, ctx.str() + " one prefill");

  // The same tokens in pieces, each continuing the state the previous one left.
  MambaStateCache pieces(config, 1);
  randomize_states(pieces, seed + 3);
  std::vector<int> bounds{0};
  for (int c : cuts)
    if (c > bounds.back() && c < total) bounds.push_back(c);
  bounds.push_back(total);
  const int64_t row = int64_t(want.size()) / total;
  for (std::size_t p = 0; p + 1 < bounds.size(); ++p) {
    const int t0 = bounds[p], t1 = bounds[p + 1];
    const MixerData part = slice_tokens(data, t0, t1);
    Buffer part_out = poisoned_output(config, t1 - t0);
    impl->forward(part.inputs(), pieces, MixerBatch::build({t1 - t0}, {0}, {1}, 1), part_out.view());
    const std::vector<double> part_want(want.begin() + t0 * row, want.begin() + t1 * row);
    merge(r, compare_values(static_cast<const float*>(part_out.data()), part_want, mixer_tolerance(),
                            "out (piece " + std::to_string(t0) + ".." + std::to_string(t1) + ")"),
          ctx.str());
  }
  compare_slot(r, pieces, ref, 0, ctx.str() + " pieces");
  return r;
}

}  // namespace attn::test
