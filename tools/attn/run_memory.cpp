#include "run_memory.hpp"

#include <algorithm>

#include "attn/checked.hpp"
#include "attn/registry.hpp"
#include "mixer_run.hpp"
#include "workload.hpp"

namespace attn_cli {
namespace {

const char* const kTotal = "memory needed";

// Per-token activation bytes measured on a one-token step of the same helpers the run uses,
// so the estimate cannot drift from the shapes actually allocated.
int64_t attention_token_bytes(const attn::LayerConfig& cfg) {
  Rng rng(0);
  int64_t bytes = 0;
  for (bool expanded : {false, true}) {
    if (expanded && !cfg.use_mla) break;
    const StepInputs in = random_inputs(cfg, 1, rng, expanded);
    const int64_t b = int64_t(in.q.bytes() + in.k.bytes() + in.v.bytes() + make_output(cfg, 1, expanded).bytes());
    bytes = std::max(bytes, b);
  }
  return bytes;
}

int64_t mixer_token_bytes(const attn::MixerConfig& mc) {
  Rng rng(0);
  const MixerStepInputs in = random_mixer_inputs(mc, 1, rng);
  int64_t bytes = int64_t(make_mixer_output(mc, 1).bytes());
  for (const attn::Buffer* b : {&in.x, &in.k, &in.v, &in.dt, &in.B, &in.C, &in.b, &in.z}) bytes += int64_t(b->bytes());
  return bytes;
}

}  // namespace

void RunMemory::add_attention_group(const attn::BackendDescriptor& backend, const attn::ModelLayer& sample, int layers,
                                    int32_t num_blocks, int32_t block_size) {
  const attn::LayerConfig& cfg = sample.attention;
  const int64_t cache = backend.cache_spec(cfg, num_blocks, block_size).bytes();
  kv_ = attn::checked_sum(kTotal, {kv_, attn::checked_product(kTotal, {cache, layers})});
  kv_layers_ += layers;
  if (auto ref = attn::Registry::instance().find("reference")) {
    reference_ = std::max(reference_, ref->cache_spec(oracle_config(cfg), num_blocks, block_size).bytes());
  }
  attention_token_ = std::max(attention_token_, attention_token_bytes(cfg));
  // Every recorded step keeps its metadata; the block table is the part that grows with length.
  const int64_t steps = int64_t(shape_.decode_steps) + 1;
  recorded_tables_ = std::max(recorded_tables_, attn::checked_product(kTotal, {steps, num_blocks, int64_t(sizeof(int32_t))}));
}

int64_t mixer_state_bytes(const attn::MixerConfig& mc, int32_t slots) {
  const int64_t conv = attn::checked_nbytes("mixer conv state", attn::DType::float32, mc.conv_state_shape(slots));
  const int64_t ssm = attn::checked_nbytes("mixer ssm state", attn::DType::float32, mc.ssm_state_shape(slots));
  return attn::checked_sum(kTotal, {conv, ssm});
}

void RunMemory::add_mixer_group(const attn::MixerConfig& mc, int layers) {
  state_ = attn::checked_sum(kTotal, {state_, attn::checked_product(kTotal, {mixer_state_bytes(mc, shape_.batch), layers})});
  state_layers_ += layers;
  mixer_token_ = std::max(mixer_token_, mixer_token_bytes(mc));
}

int64_t RunMemory::activations() const {
  const int64_t prefill_tokens = int64_t(shape_.batch) * shape_.prompt_len;  // checked in check_run_options
  const int64_t in_flight = attn::checked_product(kTotal, {prefill_tokens, std::max(attention_token_, mixer_token_)});
  const int64_t recorded = attn::checked_product(
      kTotal, {int64_t(shape_.batch), shape_.tokens_per_seq, attn::checked_sum(kTotal, {attention_token_, mixer_token_})});
  return attn::checked_sum(kTotal, {in_flight, recorded, recorded_tables_});
}

int64_t RunMemory::total() const { return attn::checked_sum(kTotal, {kv_, state_, reference_, activations()}); }

std::string RunMemory::breakdown() const {
  using attn::format_bytes;
  std::string s = "KV caches " + format_bytes(uint64_t(kv_)) + " in " + std::to_string(kv_layers_) + " layers";
  if (state_layers_) s += " + mixer state " + format_bytes(uint64_t(state_)) + " in " + std::to_string(state_layers_) + " layers";
  if (reference_) s += " + reference cache " + format_bytes(uint64_t(reference_));
  return s + " + activations " + format_bytes(uint64_t(activations()));
}

void RunMemory::check(const attn::MemoryBudget& budget) const {
  attn::check_memory(kTotal, uint64_t(total()), budget,
                     breakdown() + "; lower --batch, --prompt-len or --decode-steps, or raise --memory-limit / " +
                         attn::limits::kMemoryLimitEnv);
}

}  // namespace attn_cli
