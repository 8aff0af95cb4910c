#pragma once
// What `run` and `check` share: random activations, one layer's backend + paged cache driven
// step by step, the reference ("oracle") form of a layer, and output comparison.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attn/backend.hpp"
#include "attn/kv_cache.hpp"
#include "attn/layer.hpp"
#include "attn/metadata.hpp"
#include "attn/tensor.hpp"
#include "testkit/tolerance_table.hpp"

namespace attn_cli {

/// splitmix64: fast, seedable, identical on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform(float lo, float hi) { return lo + (hi - lo) * float(next() >> 40) * (1.0f / 16777216.0f); }

 private:
  uint64_t s_;
};

/// New q / k / v of one step for one layer: q [T, heads, head_size], k [T, kv_heads, head_size],
/// v [T, kv_heads, head_size_v], values U(-1, 1) in the layer's dtype. MLA layers store one
/// latent entry whose first head_size_v values are V, so `v()` is a view into k.
struct StepInputs {
  attn::Buffer q, k, v;        // v stays empty when the value lives in k
  int32_t v_width_in_k = 0;    // MLA: head_size_v
  attn::TensorView value() const;
};
/// `mla_expanded`: q is the expanded form's [T, heads, qk_nope_head_dim + qk_rope_head_dim].
StepInputs random_inputs(const attn::LayerConfig& cfg, int32_t num_tokens, Rng& rng, bool mla_expanded = false);
/// [T, heads, head_size_v] in the layer's dtype ([T, heads, v_head_dim] for MLA's expanded form).
attn::Buffer make_output(const attn::LayerConfig& cfg, int32_t num_tokens, bool mla_expanded = false);

/// The dense layer the reference computes for a fast-path config: MLA's absorbed form is MQA
/// with a 576-wide key whose first 512 values are the value; top-k sparse with the indices
/// `sparse_indices` produces (each token's last index_topk positions) is a sliding window.
attn::LayerConfig oracle_config(const attn::LayerConfig& cfg);
/// The reference oracle's parameters for a layer run with `p`: the layer's scale made explicit
/// (the oracle's head_size may differ: MLA), its config through oracle_config, and no kernel
/// variant (a tuned variant names one of the layer's backend, not the reference's).
attn::LayerParams oracle_params(const attn::LayerParams& p);
/// [T, index_topk] int32: the positions max(0, p - topk + 1) .. p of each query token at
/// position p, shuffled, padded with -1.
attn::Buffer sparse_indices(const attn::BatchMetadata& md, int topk, Rng& rng);

/// fp8 / fp8_e4m3 / fp8_e5m2 / fp8_inc caches: non-unit K and V scales (one per KV head when the layer uses
/// per-head scales), so the backend and the reference both have to apply them. Others: no-op.
void set_fp8_scales(attn::KVCache& cache, const attn::LayerConfig& cfg);

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

/// |out - ref| <= atol + rtol·|ref| per element (absolute numbers for one comparison).
using Tolerance = attn::test::Tolerance;
/// The test suite's tolerance table (testkit/tolerance_table.hpp) for the layer's dtype and
/// KV-cache storage, its absolute part scaled by max|ref|. Quantized caches add nothing: the
/// backend and the reference dequantize the same stored values with the same scales (fp8_ds_mla
/// with a 16-bit layer dtype: the reordered rule, as the oracle's cache rounds those values).
Tolerance tolerance_for(const attn::LayerConfig& cfg, const attn::Buffer& ref);
/// The same table's rule for an oracle that rounds its inputs at different points (MLA's
/// expanded form checked through the absorbed reference).
Tolerance reordered_tolerance_for(const attn::LayerConfig& cfg, const attn::Buffer& ref);

struct Comparison {
  bool ok = true;
  double max_abs_err = 0;
  std::string first_failure;  // "[token 3, head 1, dim 7]: 0.5 vs 0.25" (NaN counts as a failure)
};
Comparison compare(const attn::Buffer& out, const attn::Buffer& ref, Tolerance tol);

}  // namespace attn_cli
