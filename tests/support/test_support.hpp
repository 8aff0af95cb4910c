#pragma once
// Shared test machinery: the tolerance table's rule (testkit/tolerance_table.hpp, the ONE place
// tolerances live), random ragged
// batches over a paged cache (permuted / aliased block tables, NaN poison), an independent fp64
// dense attention reference, and a comparison that also proves every output was written.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "testkit/tolerance_table.hpp"

namespace attn::test {

/// The table's rule (tolerance_table.hpp) for a case whose reference output is `ref`: the
/// absolute part is scaled by max|ref|.
/// v_max: the largest |V| the case's cache stores (0: unknown, the stricter bound).
Tolerance tolerance(DType io, DType kv_storage, const std::vector<double>& ref, double v_max = 0);

/// A fresh seed per run (env ATTN_TEST_SEED pins it); print it on failure to reproduce.
uint64_t fresh_seed();

struct SeqShape {
  int context_len = 0;  // tokens already cached
  int query_len = 1;    // new tokens this step
};

struct CaseSpec {
  LayerConfig config;
  std::vector<SeqShape> seqs;
  int block_size = 16;
  uint64_t seed = 1;
  bool permute_blocks = true;   // block tables are a random permutation of the pool
  bool alias_prefix = false;    // every sequence shares sequence 0's full leading blocks
  int spare_blocks = 3;         // unused (NaN-poisoned) blocks in the pool
  float scale = 0;              // 0 → 1/sqrt(head_size)
  bool per_head_scales = false; // fp8 caches: one scale per KV head (else per tensor)
  bool mm_prefix = false;       // each sequence gets a random multimodal prefix range in the step metadata
  int num_threads = 0;
  float value_range = 1.0f;     // q/k/v ~ U(-range, range)
  // Wide score range: per sequence and KV head, one key in every 128 positions (and the newest
  // one half the time) points along a direction every query of that head group leans towards,
  // scoring ~10-12 against ~±1 for the others. Outputs are then dominated by a few keys, are
  // O(1) even at long contexts, and a dropped key, split or rescale changes them visibly.
  bool plant_keys = true;
  // The cache layout, in place of the backend's (a backend serving several layouts is checked
  // on each); unset: BackendDescriptor::cache_spec's.
  std::optional<KVLayout> layout;
  // The cache over engine-laid-out memory (KVCache(spec, StridedKV)) in vLLM's per-token [K | V]
  // rows: head-major blocks ([heads][tokens][K | V], vLLM's LBHNC) or token-major ([tokens][heads]
  // [K | V], LBNHC), with NaN padding after every row and block.
  enum class Strided { none, head_major, token_major };
  Strided strided = Strided::none;
  std::string describe() const; // one line with the seed, for failure messages
};

/// A prepared case: cache written through the backend's write_kv, metadata for the step, q,
/// and a NaN-poisoned output buffer.
struct Case {
  CaseSpec spec;
  LayerParams params;
  std::string backend;
  std::unique_ptr<AttentionImpl> impl;
  std::unique_ptr<KVCache> cache;
  Buffer strided_memory;  // the memory a strided cache reads (CaseSpec::strided)
  BatchMetadata md;
  Buffer q, out;
  // Dense fp64 copies as the cache holds them (dequantized): per sequence [len, kv_heads, d].
  std::vector<std::vector<double>> dense_k, dense_v;
};

/// Builds the case for `backend` (its cache layout, its write_kv). Throws on invalid specs.
Case make_case(const CaseSpec& spec, const std::string& backend);
/// Poisons `out` with NaN and runs forward.
void run_forward(Case& c);
/// fp64 dense attention over the case ([num_tokens, num_heads, head_size_v], row-major).
/// `fault` plants a known kernel bug in it (support/planted_faults.hpp); none by default.
struct Fault;
/// A small cache of a byte format (int4 / nvfp4 / turboquant): 3 blocks of 16 slots, 2 KV heads,
/// int8 storage, head size `head`, `layout`.
KVCacheSpec byte_cache_spec(KVCacheDType k, KVLayout layout, int head);
/// int4_per_token_head's inverse rotation in fp64 (x = D·H·y / n, see int4_head).
void unrotate_fp64(double* y, int n);
/// The query an int4 cache's attention sees, back in the model's space: rotated in fp32, rounded
/// to the I/O dtype (vLLM's single_rht(q.float()).to(q.dtype)), rotated back in fp64.
void int4_query_fp64(const void* q, DType io, int64_t offset, int n, double* dst);

std::vector<double> reference_attention(const Case& c);
std::vector<double> reference_attention(const Case& c, const Fault& fault);

struct CompareResult {
  bool ok = true;
  double max_abs_err = 0;
  double tolerance_used = 0;  // max over elements of |out - ref| / (atol + rtol·|ref|); > 1 fails
  std::string message;  // first failing element, with coordinates
};
/// Compares c.out with `ref` under `tol`; any NaN (unwritten poison) fails.
CompareResult compare_output(const Case& c, const std::vector<double>& ref, Tolerance tol);
/// Compares under the tolerance table's rule for the case's dtypes, scaled to `ref`.
CompareResult compare_output(const Case& c, const std::vector<double>& ref);
/// Convenience: make, run, compare against the fp64 reference with the central tolerance.
CompareResult check_backend(const CaseSpec& spec, const std::string& backend);

/// Output as doubles (row-major).
std::vector<double> output_values(const Case& c);

}  // namespace attn::test
