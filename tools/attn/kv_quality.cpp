#include "kv_quality.hpp"

#include <algorithm>
#include <cmath>

#include "attn/error.hpp"
#include "attn/numeric.hpp"
#include "attn/registry.hpp"
#include "bench_shapes.hpp"
#include "workload.hpp"

namespace attn_cli {
namespace {

using attn::KVCacheDType;

/// Every 16th channel ×20 and one value in 500 ×50: the outlier-channel shape of real K / V.
void add_outliers(attn::Buffer& b, int width, Rng& rng) {
  for (int64_t i = 0; i < b.view().numel(); ++i) {
    float x = attn::load_as_float(b.data(), b.dtype(), i);
    if ((i % width) % 16 == 5) x *= 20.0f;
    if (rng.next() % 500 == 0) x *= 50.0f;
    attn::store_from_float(b.data(), b.dtype(), i, x);
  }
}

float absmax(const attn::Buffer& b) {
  float m = 0;
  for (int64_t i = 0; i < b.view().numel(); ++i) m = std::max(m, std::fabs(attn::load_as_float(b.data(), b.dtype(), i)));
  return m;
}

}  // namespace

std::vector<KvQualityRow> kv_quality(uint64_t seed) {
  auto ref = attn::Registry::instance().find("reference");
  attn::require(ref != nullptr, "backend", "reference", "a registered 'reference' backend");
  attn::LayerConfig cfg;
  cfg.num_heads = 32, cfg.num_kv_heads = 8, cfg.head_size = 128, cfg.dtype = attn::DType::bfloat16;
  constexpr int kBlock = 16, kContext = 1024;
  const int32_t num_blocks = (kContext + 17 + kBlock - 1) / kBlock * 2 + 2;
  const std::vector<attn::SequenceSpec> prefix = {{0, kContext, {}}, {0, kContext, {}}};
  std::vector<KvQualityRow> out;
  for (bool outliers : {false, true}) {
    Rng rng(seed + (outliers ? 7 : 0));
    // Two sequences of 1024 cached tokens: one decodes a token, one takes a 16-token chunk.
    std::vector<attn::SequenceSpec> pre = prefix, step = {{kContext, 1, {}}, {kContext, 16, {}}};
    for (std::size_t s = 0; s < 2; ++s)
      for (int b = 0; b < (kContext + 16 + kBlock - 1) / kBlock; ++b) pre[s].block_ids.push_back(int32_t(s) * (num_blocks / 2) + b);
    for (std::size_t s = 0; s < 2; ++s) step[s].block_ids = pre[s].block_ids;
    const attn::BatchMetadata pre_md = attn::BatchMetadata::build(pre, kBlock, num_blocks, true);
    const attn::BatchMetadata md = attn::BatchMetadata::build(step, kBlock, num_blocks, true);
    StepInputs pre_in = random_inputs(cfg, pre_md.num_tokens, rng), in = random_inputs(cfg, md.num_tokens, rng);
    if (outliers)
      for (StepInputs* x : {&pre_in, &in}) add_outliers(x->k, cfg.head_size, rng), add_outliers(x->v, cfg.head_size, rng);
    const float k_amax = std::max(absmax(pre_in.k), absmax(in.k)), v_amax = std::max(absmax(pre_in.v), absmax(in.v));

    auto output = [&](KVCacheDType kv) {
      attn::LayerParams p;
      p.config = cfg;
      p.config.kv_cache_dtype = kv;
      LayerRunner r(*ref, p, num_blocks, kBlock);
      if (kv == KVCacheDType::fp8_e4m3) r.cache().set_scales({k_amax / attn::kFp8E4M3Max}, {v_amax / attn::kFp8E4M3Max});
      r.write(pre_md, pre_in);
      r.write(md, in);
      attn::Buffer o = make_output(cfg, md.num_tokens);
      Rng unused(0);
      r.run(*r.plan(md), in, o.view(), unused, false);
      std::vector<double> v(std::size_t(o.view().numel()));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = attn::load_as_float(o.data(), o.dtype(), int64_t(i));
      return v;
    };
    const std::vector<double> base = output(KVCacheDType::auto_);
    for (KVCacheDType kv : quantized_kv_dtypes()) {
      const std::vector<double> q = output(kv);
      double max_ref = 0, max_err = 0, err2 = 0, ref2 = 0, dot = 0, q2 = 0;
      for (std::size_t i = 0; i < q.size(); ++i) {
        const double e = q[i] - base[i];
        max_ref = std::max(max_ref, std::fabs(base[i])), max_err = std::max(max_err, std::fabs(e));
        err2 += e * e, ref2 += base[i] * base[i], dot += q[i] * base[i], q2 += q[i] * q[i];
      }
      out.push_back({kv, outliers ? "outlier channels" : "uniform", max_err / max_ref, std::sqrt(err2 / ref2), dot / std::sqrt(q2 * ref2)});
    }
  }
  return out;
}

}  // namespace attn_cli
