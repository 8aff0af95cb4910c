#pragma once
// What `tune` times: one layer config on one shape (decode or prefill) for one backend and block
// size, with random inputs and a random paged cache; one run() per call, plan made once.
#include <memory>
#include <string>
#include <vector>

#include "attn/backend.hpp"
#include "attn/kv_cache.hpp"
#include "attn/layer.hpp"
#include "attn/step.hpp"

namespace attn::tune_detail {

/// A step of `query_lens[s]` new tokens over `context_lens[s]` cached ones per sequence.
struct Shape {
  std::string name;  // "decode" / "prefill"
  std::vector<int64_t> context_lens, query_lens;
};

/// Inputs and cache of one (config, shape, backend, block size); shared by the backend's variants.
class Workload {
 public:
  Workload(const LayerConfig& config, const Shape& shape, const BackendDescriptor& backend, int block_size);
  const BatchMetadata& metadata() const { return md_; }
  const KVCache& cache() const { return *cache_; }
  /// The arguments of one run (no new K/V: the cache already holds the context).
  ForwardArgs args(Workspace& ws) const;

 private:
  BatchMetadata md_;
  std::unique_ptr<KVCache> cache_;
  Buffer q_, out_, topk_;
};

/// One implementation (backend × variant) planned on one workload.
class TimedRun {
 public:
  TimedRun(const LayerParams& params, const std::string& backend, const Workload& workload);
  /// Wall-clock seconds of one run (what a step waits for; CPU time would hide a backend that
  /// leaves threads idle).
  double run_once(Workspace& ws) const;

 private:
  const Workload* workload_;
  Layer layer_;
  std::shared_ptr<const StepPlan> plan_;
};

}  // namespace attn::tune_detail
