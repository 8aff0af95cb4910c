#pragma once
/// Expanded-form MLA prefill: the cached latent of each sequence is up-projected per head
/// (K = [c·W_UK[h] | k_pe], V = c·W_UV[h]) and ordinary causal attention runs with head_dim_qk =
/// qk_nope + rope and head_dim_v = v_head_dim. Cheaper than the absorbed form for long prompts.
#include <cstdint>
#include <vector>

#include "kernels/gather/mla_forward.hpp"

namespace attn::mla {

struct UpProjections {
  int nope = 0, v_dim = 0;
  std::vector<float> w_uk;  // [heads][rank][nope]
  std::vector<float> w_uv;  // [heads][rank][v_dim]
  bool empty() const { return w_uk.empty(); }
};

/// q: [num_tokens, heads, nope + rope] → out: [num_tokens, heads, v_dim].
void expanded_forward(const MlaShape& shape, const UpProjections& w, const TensorView& q, const KVCache& cache,
                      const BatchMetadata& md, const TensorView& out);

/// FLOPs of each form for this batch (2 per multiply-add), for choosing between them.
double absorbed_flops(const MlaShape& shape, const BatchMetadata& md);
double expanded_flops(const MlaShape& shape, int nope, int v_dim, const BatchMetadata& md);

}  // namespace attn::mla
