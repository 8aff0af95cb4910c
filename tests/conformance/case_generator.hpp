#pragma once
// Conformance cases generated from what a backend declares (its Capabilities), never from a
// hand-kept list: head and block sizes sampled from its SizeRules, every dtype and dense KV-cache
// dtype it lists, each feature it claims (sinks, window, soft-cap, ALiBi, non-causal, attention
// types, distinct V width, per-head fp8 scales), GQA group sizes 1 / 4 / 8 and MQA, on ragged
// batches with permuted or aliased block tables. Cases the backend's own checks reject (extra
// rules beyond Capabilities, as attn::evaluate reports them) are dropped, not run.
#include <cstdint>
#include <string>
#include <vector>

#include "attn/backend.hpp"
#include "support/test_support.hpp"

namespace attn::test {

enum class SweepSize {
  quick,    // ATTN_TEST_QUICK=1 (sanitizer CI): each dimension touched once
  normal,   // default: every sampled value of each dimension, features with two dtypes
  long_,    // *Long* tests: dtype x kv dtype x head size product, bigger batches
};

/// quick when ATTN_TEST_QUICK is set to a non-empty value other than "0", else `fallback`.
SweepSize sweep_from_env(SweepSize fallback);

struct GeneratedCase {
  CaseSpec spec;
  std::string label;  // what the case exercises ("head_size=72", "sinks", "gqa 8:1", ...)
};

/// Every case for `backend` on `platform`, seeded deterministically from `base_seed`.
std::vector<GeneratedCase> generate_cases(const BackendDescriptor& backend, const Platform& platform, SweepSize size,
                                          uint64_t base_seed);

/// Sizes to try from a rule: its ends, a middle value and extras; small odd values for `any`.
std::vector<int> sample_sizes(const SizeRule& rule, int max_count, int cap);

/// True when the backend serves ordinary dense attention on the CPU (the generic oracle applies):
/// not MLA / top-k sparse / block-sparse / attention-free, not synthetic.
bool is_dense_cpu_backend(const BackendDescriptor& backend);

}  // namespace attn::test
