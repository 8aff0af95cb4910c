#pragma once
// fp64 oracles for the MLA / sparse backends, independent of their kernels:
//  - absorbed MLA straight on the (dequantized) latent cache;
//  - explicit per-head attention with K/V up-projected from the latent by random W_UK / W_UV,
//    which the absorbed form must equal after projecting its latent output with W_UV;
//  - top-k sparse MLA (listed positions only) and Phi-3-small block-sparse attention.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "support/test_support.hpp"

namespace attn::test {

struct MlaCaseSpec {
  std::string backend = "cpu_mla";
  int num_heads = 16, rank = 512, rope = 64, nope = 128, v_dim = 128;
  DType dtype = DType::bfloat16;
  KVCacheDType kv_cache_dtype = KVCacheDType::auto_;
  std::vector<SeqShape> seqs;
  int block_size = 16;
  uint64_t seed = 1;
  bool alias_prefix = false;  // every sequence shares sequence 0's leading full context blocks
  int topk = 0;               // > 0: use_sparse with this many indices per token (padded with -1)
  float kv_scale = 1.0f;      // fp8 caches
  int num_threads = 0;
  // Optional: rewrites the latent entry (rank + rope values drawn uniform in [-1, 1]) of write
  // token `token` before it is written (e.g. fp8_ds_mla tiles of very different scales).
  std::function<void(int token, float* entry)> shape_entry = {};
  std::string describe() const;
};

struct MlaCase {
  MlaCaseSpec spec;
  LayerParams params;
  std::unique_ptr<AttentionImpl> impl;
  std::unique_ptr<KVCache> cache;
  BatchMetadata md;
  Buffer q, out;                              // absorbed q [T, H, rank + rope], out [T, H, rank]
  std::vector<std::vector<double>> latent;    // per sequence [len][rank + rope], as the cache holds it
  std::vector<double> w_uk, w_uv;             // [H][rank][nope], [H][rank][v_dim]
  std::vector<double> q_nope, q_pe;           // [T][H][nope], [T][H][rope]: the un-absorbed query
  std::vector<int32_t> topk;                  // [T][spec.topk] positions, -1 = padding
};

/// The tests' usual case for `backend`: fp8 caches scaled by 0.05, and 24 indices per token where
/// the backend is cpu_sparse; block size, threads and the rest stay the defaults.
inline MlaCaseSpec mla_spec(const std::string& backend, int num_heads, DType dtype, KVCacheDType kv, uint64_t seed,
                            std::vector<SeqShape> seqs) {
  return MlaCaseSpec{.backend = backend,
                     .num_heads = num_heads,
                     .dtype = dtype,
                     .kv_cache_dtype = kv,
                     .seqs = std::move(seqs),
                     .seed = seed,
                     .topk = backend == "cpu_sparse" ? 24 : 0,
                     .kv_scale = 0.05f};
}

/// Builds the case: latent written through the backend's write_kv into a NaN-poisoned cache with
/// permuted (optionally aliased) block tables; q = [W_UK[h]·q_nope | q_pe] in the layer dtype.
MlaCase make_mla_case(const MlaCaseSpec& spec);
/// Poisons out with NaN, hands over the top-k indices (sparse) and runs forward().
void run_mla_forward(MlaCase& c);

/// [T][H][rank]: softmax(q·entry · scale) · latent over the visible (or listed) positions,
/// with q read back from c.q.
std::vector<double> mla_absorbed_reference(const MlaCase& c);
/// [T][H][v_dim]: explicit attention with k = [c·W_UK[h] | k_pe], v = c·W_UV[h], q = [q_nope | q_pe].
std::vector<double> mla_explicit_reference(const MlaCase& c);
/// [T][H][v_dim]: a latent output projected by W_UV (to compare the absorbed form with the explicit one).
std::vector<double> project_latent(const MlaCase& c, const std::vector<double>& latent_out);
/// Values of a float tensor as doubles.
std::vector<double> tensor_values(const Buffer& b);
/// max |a - b| and whether every |a - b| <= atol + rtol |b| (NaN fails).
CompareResult compare_values(const std::vector<double>& got, const std::vector<double>& ref, Tolerance tol);
/// The same under the tolerance table's rule for (io, kv_storage), scaled to this reference.
CompareResult compare_values(const std::vector<double>& got, const std::vector<double>& ref, DType io, DType kv_storage);

/// Block-sparse (Phi-3-small) fp64 reference over a generic Case: query head h's block qb sees
/// key block kb iff kb <= qb and (qb - kb < bs_local_blocks or
/// (kb + h * bs_head_sliding_step + 1) % bs_vert_stride == 0).
std::vector<double> blocksparse_reference(const Case& c);

}  // namespace attn::test
