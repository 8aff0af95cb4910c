#pragma once
// The check harness `attn check`, `attn run` and the tests share: seeded random activations of
// one step, the reference ("oracle") form of a layer and its parameters, the tolerance table's
// numbers for a layer and an output comparison against the oracle.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "attn/backend.hpp"
#include "attn/kv_cache.hpp"
#include "attn/layer_config.hpp"
#include "attn/metadata.hpp"
#include "attn/step.hpp"
#include "attn/tensor.hpp"
#include "testkit/tolerance_table.hpp"

namespace attn::testkit {

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

/// |out - ref| <= atol + rtol·|ref| per element (absolute numbers for one comparison).
using Tolerance = attn::test::Tolerance;
/// The test suite's tolerance table (tolerance_table.hpp) for the layer's dtype and
/// KV-cache storage, its absolute part scaled by max|ref|. Quantized caches add nothing: the
/// backend and the reference dequantize the same stored values with the same scales (fp8_ds_mla
/// with a 16-bit layer dtype: the reordered rule, as the oracle's cache rounds those values).
Tolerance tolerance_for(const attn::LayerConfig& cfg, const attn::Buffer& ref);
/// The same table's rule for an oracle that rounds its inputs at different points (MLA's
/// expanded form checked through the absorbed reference).
Tolerance reordered_tolerance_for(const attn::LayerConfig& cfg, const attn::Buffer& ref);

/// The element-wise check of an output against its reference, shared by `compare` and the test
/// suite's: element i fails unless |out(i) - ref(i)| <= atol + rtol·|ref(i)| (a NaN fails).
struct ElementCheck {
  bool ok = true;
  double max_abs_err = 0;      // over the finite errors
  double tolerance_used = 0;   // max over finite errors of |out - ref| / (atol + rtol·|ref|); > 1 fails
  int64_t first_failure = -1;  // flat index of the first failing element
};
/// `out(i)`, `ref(i)`: element i (0 <= i < n) as a double.
template <class Out, class Ref>
ElementCheck check_elements(int64_t n, Out out, Ref ref, Tolerance tol) {
  ElementCheck c;
  for (int64_t i = 0; i < n; ++i) {
    const double a = out(i), b = ref(i);
    const double err = std::fabs(a - b), bound = tol.atol + tol.rtol * std::fabs(b);
    if (std::isfinite(err)) {
      c.max_abs_err = std::max(c.max_abs_err, err);
      c.tolerance_used = std::max(c.tolerance_used, bound > 0 ? err / bound : err > 0 ? HUGE_VAL : 0.0);
    }
    if (!(err <= bound) && c.ok) c.ok = false, c.first_failure = i;  // NaN fails too
  }
  return c;
}

struct Comparison {
  bool ok = true;
  double max_abs_err = 0;
  std::string first_failure;  // "[token 3, head 1, dim 7]: 0.5 vs 0.25" (NaN counts as a failure)
};
Comparison compare(const attn::Buffer& out, const attn::Buffer& ref, Tolerance tol);

}  // namespace attn::testkit
