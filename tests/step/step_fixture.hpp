#pragma once
// Two layers of one step for the plan / run tests: equal configs and equal block tables (so one
// plan serves both), different caches, activations and weights (seed, scale, sinks).
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "support/test_support.hpp"

namespace attn::test {

/// A mixed step (prefill, chunked prefill, decode) with GQA and sinks: every layer parameter a
/// plan must not depend on differs between layer 0 and layer 1.
inline CaseSpec step_layer_spec(int layer, int num_threads = 0) {
  CaseSpec s;
  s.config.num_heads = 8, s.config.num_kv_heads = 2, s.config.head_size = 64;
  s.config.dtype = DType::bfloat16;
  s.config.has_sink = true;
  s.seqs = {{0, 70}, {37, 9}, {300, 1}, {5, 1}, {1100, 1}};
  s.block_size = 16;
  s.permute_blocks = false;  // the same block tables for every layer: one KV-cache group
  s.seed = 1000 + uint64_t(layer);
  s.scale = layer == 0 ? 0.0f : 0.11f;
  s.num_threads = num_threads;
  return s;
}

/// A copy of `b` (same dtype, shape and bytes).
inline Buffer copy_of(const Buffer& b) {
  Buffer c(b.dtype(), b.shape());
  std::memcpy(c.data(), b.data(), b.bytes());
  return c;
}

/// Bitwise equality of two outputs (one plan or many, one thread or two: the same bits).
inline bool same_bits(const Buffer& a, const Buffer& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

/// args for one layer of `c` writing into `out`.
inline ForwardArgs args_for(Case& c, Buffer& out, Workspace* ws) {
  ForwardArgs a;
  a.q = c.q.view(), a.out = out.view(), a.cache = c.cache.get(), a.workspace = ws;
  return a;
}

}  // namespace attn::test
