#pragma once
// What `run` and `check` share: one layer's backend + paged cache driven step by step, over the
// check harness of attn_testkit (random activations, the oracle's form, comparison).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attn/backend.hpp"
#include "attn/kv_cache.hpp"
#include "attn/layer.hpp"
#include "attn/metadata.hpp"
#include "attn/tensor.hpp"
#include "testkit/harness.hpp"

namespace attn_cli {

/// The check harness (testkit/harness.hpp: Rng, random_inputs, oracle_params, tolerance_for,
/// compare, ...) under the names the CLI uses.
using namespace attn::testkit;

/// One layer served by one backend: its implementation and its paged cache (fp8 scales set by
/// set_fp8_scales).
class LayerRunner {
 public:
  /// `scales_of`: the layer whose fp8 scales the cache takes (default: params.config); an oracle
  /// runner passes the checked layer, so both dequantize with the same scales. When that layer's
  /// cache is fp8_ds_mla and this one's is not, write() stores each latent entry as fp8_ds_mla
  /// holds it (quantized and dequantized), so both read the same values.
  LayerRunner(const attn::BackendDescriptor& backend, const attn::LayerParams& params, int32_t num_blocks,
              int32_t block_size, const attn::LayerConfig* scales_of = nullptr);
  /// write_kv of this step's new tokens (k, v of `in`).
  void write(const attn::BatchMetadata& md, const StepInputs& in);
  /// This step's plan for the layer (shared by every runner of an equal config and backend).
  std::shared_ptr<const attn::StepPlan> plan(const attn::BatchMetadata& md) const;
  /// Runs this step's queries into `out` under `plan`: writes k, v of `in` first when
  /// `write_new_kv`, passes top-k indices on sparse layers, and runs MLA's expanded form when
  /// `expanded(plan)` (q and out shaped for it). Returns what ran.
  attn::RunResult run(const attn::StepPlan& plan, const StepInputs& in, const attn::TensorView& out, Rng& rng,
                      bool write_new_kv, attn::Workspace* workspace = nullptr);
  /// plan + run of one step whose K/V are already written.
  void forward(const attn::BatchMetadata& md, const StepInputs& in, const attn::TensorView& out, Rng& rng);
  std::size_t cache_bytes() const { return cache_->bytes(); }
  attn::KVCache& cache() { return *cache_; }
  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  const attn::LayerParams& params() const { return layer_.params(); }
  const attn::Layer& layer() const { return layer_; }
  std::string variant() const { return layer_.variant(); }

  /// MLA layers whose backend has the expanded form: random up-projections W_UK, W_UV in the
  /// layer's dtype (entries U(-a, a), a = sqrt(3 / the width each projected value sums over), so
  /// projected values keep the activations' scale); the layer is created again with them. False
  /// when the layer has no expanded form.
  bool use_random_up_projections(Rng& rng);
  /// True when this step runs MLA's expanded form (projections set and the plan prefers it).
  bool expanded(const attn::StepPlan& plan) const;
  const attn::Buffer& w_uk() const { return w_uk_; }  // [heads, kv_lora_rank, qk_nope_head_dim]
  const attn::Buffer& w_uv() const { return w_uv_; }  // [heads, kv_lora_rank, v_head_dim]

 private:
  attn::Layer layer_;
  int32_t num_blocks_ = 0, block_size_ = 0;
  std::unique_ptr<attn::KVCache> cache_;
  attn::Buffer w_uk_, w_uv_;
  bool round_as_ds_mla_ = false;  // an oracle of an fp8_ds_mla layer (see the constructor)
};

}  // namespace attn_cli
