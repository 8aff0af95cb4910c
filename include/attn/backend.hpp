#pragma once
/// A backend: its descriptor (capabilities, priority, factory — all data) and the per-layer
/// implementation interface (write_kv + forward over the paged cache).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attn/capabilities.hpp"
#include "attn/kv_cache.hpp"
#include "attn/layer_config.hpp"
#include "attn/metadata.hpp"
#include "attn/tensor.hpp"

namespace attn {

/// Per-layer parameters beyond the selector key.
struct LayerParams {
  LayerConfig config;
  float scale = 0.0f;                 // softmax scale; 0 → 1/sqrt(head_size)
  std::vector<float> sinks;           // [num_heads] sink logits, required iff has_sink
  std::vector<float> alibi_slopes;    // [num_heads], required iff use_alibi (empty → standard slopes)
  int num_threads = 0;                // 0 → all cores

  float effective_scale() const;
  /// Throws attn::Error if sinks / slopes do not match the config.
  void validate() const;
};

/// One layer served by one backend. Stateless across steps except for what `create` set up.
class AttentionImpl {
 public:
  virtual ~AttentionImpl() = default;
  /// k: [num_tokens, num_kv_heads, head_size], v: [num_tokens, num_kv_heads, head_size_v];
  /// token t goes to md.slot_mapping[t]. Default: KVCache::write.
  virtual void write_kv(const TensorView& k, const TensorView& v, KVCache& cache, const BatchMetadata& md);
  /// q: [num_tokens, num_heads, head_size] → out: [num_tokens, num_heads, head_size_v].
  /// Prefill, chunked prefill and decode sequences may be mixed in one call.
  virtual void forward(const TensorView& q, const KVCache& cache, const BatchMetadata& md, const TensorView& out) = 0;
  /// The kernel variant that runs (e.g. "avx512_bf16"); empty when there is only one.
  virtual std::string variant() const { return {}; }
};

/// Validates forward() arguments at the API boundary for every CPU backend: q / out shapes and
/// dtypes against the layer, the cache against the layer, and the metadata against the cache.
void check_forward_args(const LayerParams& params, const TensorView& q, const KVCache& cache, const BatchMetadata& md,
                        const TensorView& out);

/// Standard ALiBi slopes for `num_heads` heads (Press et al.; non-powers of two interleaved).
std::vector<float> alibi_slopes(int num_heads);

struct BackendDescriptor {
  std::string name;
  std::string summary;
  Capabilities caps;
  int priority = 100;                 // lower is preferred among valid backends
  /// The correctness oracle: serves every layer, far slower than a production backend; a
  /// decision that lands on it says so in its notes.
  bool oracle = false;
  int preferred_block_size = 16;      // used when the user sets no block size
  KVLayout kv_layout = KVLayout::NHD;
  /// Empty: built into the core. Otherwise the shared module ("attn_cuda") that provides the
  /// factory; loaded on first need, and "module X not loaded: why" is a reason.
  std::string module;
  /// Irregular rules that do not fit Capabilities; appended after the generic reasons.
  std::function<std::vector<Reason>(const LayerConfig&, const Platform&)> extra_checks;
  /// The kernel variant this backend would run on `platform` (shown in decisions).
  std::function<std::string(const Platform&)> variant;
  /// Builds the implementation for one layer. Null for module backends until loaded.
  std::function<std::unique_ptr<AttentionImpl>(const LayerParams&)> create;

  /// The cache spec this backend wants for `cfg` with `num_blocks` blocks of `block_size`.
  KVCacheSpec cache_spec(const LayerConfig& cfg, int32_t num_blocks, int32_t block_size) const;
};

}  // namespace attn
