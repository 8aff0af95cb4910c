#pragma once
/// Block-sparse attention over the regular paged (NHD / HND) cache: for each query tile only the
/// key blocks the pattern keeps are listed, so masked blocks are never read and cost falls with
/// sparsity. Runs on the shared tile driver and attend kernel of cpu_mla.
#include "attn/kv_cache.hpp"
#include "attn/metadata.hpp"
#include "attn/tensor.hpp"
#include "backends/cpu_blocksparse/blocksparse_pattern.hpp"
#include "kernels/gather/attend_tiles.hpp"

namespace attn::blocksparse {

struct Shape {
  int num_heads = 0, num_kv_heads = 0, head_size = 0, head_size_v = 0;
  float scale = 1.0f;
  int num_threads = 0;
};

/// The step's tiles (plan time): per sparse query block, the key blocks the pattern keeps as one
/// list of slots, shared by the rows of a KV group (or one q head, when heads differ).
mla::TilePlan plan_tiles(const Shape& shape, const Pattern& pattern, const BatchMetadata& md);
/// Workspace bytes of a run under `plan`.
std::size_t workspace_bytes(const Shape& shape, const mla::TilePlan& plan, int num_tokens);
/// q: [num_tokens, num_heads, head_size] → out: [num_tokens, num_heads, head_size_v]. Causal.
void forward(const Shape& shape, const Pattern& pattern, const mla::TilePlan& plan, const TensorView& q,
             const KVCache& cache, const BatchMetadata& md, const TensorView& out, void* workspace);

/// Keys a query at `pos` reads under the pattern (for the benchmark's sparsity figure).
int64_t visible_keys(const Pattern& pattern, int64_t pos);

}  // namespace attn::blocksparse
