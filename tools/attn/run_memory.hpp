#pragma once
// What `attn run` will allocate, added up before anything is allocated, so a run that cannot fit
// is refused with the numbers instead of ending in an out-of-memory kill halfway through set-up.
#include <cstdint>
#include <string>

#include "attn/backend.hpp"
#include "attn/limits.hpp"
#include "attn/mamba.hpp"
#include "attn/model.hpp"
#include "options.hpp"

namespace attn_cli {

/// float32 conv + SSM state bytes of one mixer layer's cache of `slots` sequences (checked).
int64_t mixer_state_bytes(const attn::MixerConfig& config, int32_t slots);

class RunMemory {
 public:
  explicit RunMemory(const RunShape& shape) : shape_(shape) {}

  /// `layers` attention layers configured like `sample`, each with its own cache of `num_blocks`
  /// blocks; the spot check may replay one of them through a reference-backend cache.
  void add_attention_group(const attn::BackendDescriptor& backend, const attn::ModelLayer& sample, int layers,
                           int32_t num_blocks, int32_t block_size);
  /// `layers` mixer layers, each with a state cache of one slot per sequence.
  void add_mixer_group(const attn::MixerConfig& config, int layers);

  int64_t kv_cache_bytes() const { return kv_; }
  int64_t state_cache_bytes() const { return state_; }
  /// Caches, the reference cache, one step's activations in flight and the recorded steps of
  /// the spot-checked layers (inputs and block tables of every step).
  int64_t total() const;
  /// "KV caches 1.0 GiB in 32 layers + ..." for the error message.
  std::string breakdown() const;
  /// Throws attn::Error naming the options to change when total() exceeds `budget`.
  void check(const attn::MemoryBudget& budget) const;

 private:
  int64_t activations() const;
  RunShape shape_;
  int64_t kv_ = 0, state_ = 0, reference_ = 0, recorded_tables_ = 0;
  int64_t attention_token_ = 0, mixer_token_ = 0;  // activation bytes per token, widest layer
  int kv_layers_ = 0, state_layers_ = 0;
};

}  // namespace attn_cli
