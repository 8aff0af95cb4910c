// Harness: cpu_flash against the reference backend on one random small layer and step. Both
// caches start as random bytes (NaN and Inf patterns included) in every slot, so a kernel that
// reads a slot the step never wrote shows up as a difference; q, K and V may carry planted NaN.
// The two outputs must agree row by row: NaN in the same rows, and finite rows within twice the
// tolerance table's bound (two computations, each within one bound of the exact result).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "fuzz/fuzz_input.hpp"
#include "fuzz/harnesses.hpp"
#include "testkit/tolerance_table.hpp"

namespace attn::fuzz {
namespace {

/// A deterministic stream of values for the tensors (the fuzzer's bytes choose the seed).
struct Values {
  uint64_t state;
  float next(float range) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return range * (float(state >> 40) / float(1ull << 23) - 1.0f);
  }
};

void fill(Buffer& b, Values& vals, float range) {
  for (int64_t i = 0; i < b.view().numel(); ++i) store_from_float(b.data(), b.dtype(), i, vals.next(range));
}

/// Random bytes over a whole cache: its unused slots hold them when the kernels run.
void scramble(KVCache& cache, uint64_t seed) {
  auto* p = static_cast<uint8_t*>(cache.data());
  for (std::size_t i = 0; i < cache.bytes(); ++i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = uint8_t(seed >> 56);
  }
}

struct Run {
  std::unique_ptr<AttentionImpl> impl;
  std::unique_ptr<KVCache> cache;
};

[[noreturn]] void mismatch(const std::string& what) { throw std::logic_error("cpu_flash and reference differ: " + what); }

}  // namespace

int differential(const uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  LayerConfig cfg;
  constexpr DType kDTypes[] = {DType::float32, DType::float16, DType::bfloat16};
  cfg.dtype = kDTypes[in.pick(3)];
  cfg.num_kv_heads = in.small(1, 3);
  cfg.num_heads = cfg.num_kv_heads * in.small(1, 3);
  constexpr int kHeadSizes[] = {8, 17, 32, 64, 80, 128};
  cfg.head_size = kHeadSizes[in.pick(6)];
  cfg.sliding_window = in.small(0, 3) == 0 ? in.small(1, 40) : 0;
  cfg.logits_soft_cap = in.small(0, 3) == 0 ? float(in.small(1, 50)) : 0.0f;
  cfg.has_sink = in.small(0, 3) == 0;
  constexpr KVCacheDType kKv[] = {KVCacheDType::auto_, KVCacheDType::auto_, KVCacheDType::fp8_e4m3, KVCacheDType::fp8_e5m2};
  cfg.kv_cache_dtype = kKv[in.pick(4)];
  const int32_t block_size = int32_t(16) << in.small(0, 1);
  std::vector<SequenceSpec> ctx_specs, step_specs;
  int32_t blocks_used = 0;
  for (int s = 0, n = in.small(1, 4); s < n; ++s) {
    const int32_t context = in.small(0, 3) == 0 ? 0 : in.small(1, 80), query = in.small(1, 12);
    const int32_t nb = (context + query + block_size - 1) / block_size;
    std::vector<int32_t> ids;
    for (int b = 0; b < nb; ++b) ids.push_back(blocks_used + b);
    std::reverse(ids.begin(), ids.end());  // blocks out of order
    blocks_used += nb;
    if (context > 0) ctx_specs.push_back({0, context, ids});
    step_specs.push_back({context, query, ids});
  }
  const int32_t num_blocks = blocks_used + 2;  // two spare blocks nobody writes
  const uint64_t seed = in.u64();
  const int nan_site = in.small(0, 5);  // 0: NaN in q, 1: in K, 2: in V, else none
  const uint32_t nan_at = in.u32();

  try {
    cfg.validate();
    const Platform& here = detect_cpu();
    auto& reg = Registry::instance();
    LayerParams params;
    params.config = cfg;
    params.num_threads = 1;
    Values vals{seed};
    for (int h = 0; h < (cfg.has_sink ? cfg.num_heads : 0); ++h) params.sinks.push_back(vals.next(2.0f));
    Run runs[2];
    const char* names[2] = {"cpu_flash", "reference"};
    for (int i = 0; i < 2; ++i) {
      const auto desc = reg.find(names[i]);
      if (!desc || !evaluate(*desc, cfg, here).valid) return 0;
      runs[i].impl = reg.create(names[i], params);
      runs[i].cache = std::make_unique<KVCache>(desc->cache_spec(cfg, num_blocks, block_size));
      scramble(*runs[i].cache, seed ^ 0x9e3779b97f4a7c15ull);
    }
    const BatchMetadata step = BatchMetadata::build(step_specs, block_size, num_blocks);
    const int64_t H = cfg.num_heads, Hkv = cfg.num_kv_heads, D = cfg.head_size, T = step.num_tokens;
    auto kv_for = [&](int64_t tokens) {
      std::pair<Buffer, Buffer> kv{Buffer(cfg.dtype, {tokens, Hkv, D}), Buffer(cfg.dtype, {tokens, Hkv, D})};
      fill(kv.first, vals, 1.0f);
      fill(kv.second, vals, 1.0f);
      return kv;
    };
    // The cached context as an earlier step wrote it, then this step's new K/V.
    if (!ctx_specs.empty()) {
      const BatchMetadata ctx = BatchMetadata::build(ctx_specs, block_size, num_blocks);
      auto [k, v] = kv_for(ctx.num_tokens);
      if (nan_site == 1) store_from_float(k.data(), cfg.dtype, int64_t(nan_at % uint32_t(k.view().numel())), std::nanf(""));
      if (nan_site == 2) store_from_float(v.data(), cfg.dtype, int64_t(nan_at % uint32_t(v.view().numel())), std::nanf(""));
      for (auto& r : runs) r.impl->write_kv(k.view(), v.view(), *r.cache, ctx);
    }
    auto [k, v] = kv_for(T);
    Buffer q(cfg.dtype, {T, H, D});
    fill(q, vals, 1.0f);
    if (nan_site == 0) store_from_float(q.data(), cfg.dtype, int64_t(nan_at % uint32_t(q.view().numel())), std::nanf(""));
    Buffer out[2] = {Buffer(cfg.dtype, {T, H, D}), Buffer(cfg.dtype, {T, H, D})};
    for (int i = 0; i < 2; ++i) {
      runs[i].impl->write_kv(k.view(), v.view(), *runs[i].cache, step);
      runs[i].impl->forward(q.view(), *runs[i].cache, step, out[i].view());
    }

    // Row by row: NaN in one exactly where in the other; finite rows within twice the bound.
    const auto rule = test::tolerance_rule(cfg.dtype, runs[1].cache->spec().dtype);
    double ref_max = 0;
    for (int64_t i = 0; i < T * H * D; ++i) {
      const float r = load_as_float(out[1].data(), cfg.dtype, i);
      if (std::isfinite(r)) ref_max = std::max(ref_max, double(std::fabs(r)));
    }
    const test::Tolerance tol = rule.scaled(ref_max, 1.0);  // |V| <= 1: values are drawn from [-1, 1]
    for (int64_t row = 0; row < T * H; ++row) {
      bool nan[2] = {false, false};
      for (int i = 0; i < 2; ++i)
        for (int64_t x = 0; x < D; ++x) nan[i] = nan[i] || std::isnan(load_as_float(out[i].data(), cfg.dtype, row * D + x));
      if (nan[0] != nan[1])
        mismatch("row " + std::to_string(row) + " is NaN on " + names[nan[0] ? 0 : 1] + " only (" + cfg.to_string() + ")");
      if (nan[0]) continue;
      for (int64_t x = 0; x < D; ++x) {
        const double a = load_as_float(out[0].data(), cfg.dtype, row * D + x), b = load_as_float(out[1].data(), cfg.dtype, row * D + x);
        if (!(std::fabs(a - b) <= 2 * (tol.atol + tol.rtol * std::fabs(b))))
          mismatch("row " + std::to_string(row) + " element " + std::to_string(x) + ": " + std::to_string(a) + " vs " +
                   std::to_string(b) + " (" + cfg.to_string() + ")");
      }
    }
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace attn::fuzz
