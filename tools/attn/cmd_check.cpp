// `attn check`: every available backend against the reference on random inputs, on this
// machine. Each backend runs the shapes from a fixed list that its capabilities accept, on a
// ragged batch (a prefill, a chunked prefill and a decode sequence) over a permuted block table.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "attn/error.hpp"
#include "attn/registry.hpp"
#include "attn/selector.hpp"
#include "commands.hpp"
#include "kv_quality.hpp"
#include "workload.hpp"

namespace attn_cli {
namespace {

using nlohmann::json;

struct Shape {
  std::string name;
  attn::LayerConfig config;
};

std::vector<Shape> shapes() {
  auto gqa = [](int heads, int kv, int head, attn::DType dtype) {
    attn::LayerConfig c;
    c.num_heads = heads;
    c.num_kv_heads = kv;
    c.head_size = head;
    c.dtype = dtype;
    return c;
  };
  std::vector<Shape> out;
  out.push_back({"gqa 8/2 x128 bf16", gqa(8, 2, 128, attn::DType::bfloat16)});
  out.push_back({"mha 4/4 x64 fp16", gqa(4, 4, 64, attn::DType::float16)});
  out.push_back({"gqa 6/2 x80 fp32", gqa(6, 2, 80, attn::DType::float32)});
  Shape window{"window 16", gqa(8, 2, 128, attn::DType::bfloat16)};
  window.config.sliding_window = 16;
  out.push_back(window);
  Shape cap{"soft-cap 50 x256", gqa(4, 2, 256, attn::DType::bfloat16)};
  cap.config.logits_soft_cap = 50.0f;
  out.push_back(cap);
  Shape sinks{"sinks + window x64", gqa(8, 2, 64, attn::DType::bfloat16)};
  sinks.config.has_sink = true;
  sinks.config.sliding_window = 24;
  out.push_back(sinks);
  Shape fp8{"fp8_e4m3 scaled", gqa(8, 2, 128, attn::DType::bfloat16)};
  fp8.config.kv_cache_dtype = attn::KVCacheDType::fp8_e4m3;
  out.push_back(fp8);
  Shape fp8_heads{"fp8_e5m2 per-head", gqa(8, 4, 64, attn::DType::float16)};
  fp8_heads.config.kv_cache_dtype = attn::KVCacheDType::fp8_e5m2;
  fp8_heads.config.use_per_head_quant_scales = true;
  out.push_back(fp8_heads);
  Shape int8{"int8 per-token-head", gqa(8, 2, 128, attn::DType::bfloat16)};
  int8.config.kv_cache_dtype = attn::KVCacheDType::int8_per_token_head;
  out.push_back(int8);
  Shape fp8_tok{"fp8 per-token-head x64", gqa(8, 4, 64, attn::DType::float16)};
  fp8_tok.config.kv_cache_dtype = attn::KVCacheDType::fp8_per_token_head;
  fp8_tok.config.sliding_window = 24;
  out.push_back(fp8_tok);
  Shape int4{"int4 per-token-head x64", gqa(8, 2, 64, attn::DType::bfloat16)};
  int4.config.kv_cache_dtype = attn::KVCacheDType::int4_per_token_head;
  out.push_back(int4);
  Shape nvfp4{"nvfp4_4over6 x128", gqa(8, 2, 128, attn::DType::bfloat16)};
  nvfp4.config.kv_cache_dtype = attn::KVCacheDType::nvfp4_4over6;
  out.push_back(nvfp4);
  Shape tq{"turboquant_k3v4_nc x128", gqa(8, 2, 128, attn::DType::bfloat16)};
  tq.config.kv_cache_dtype = attn::KVCacheDType::turboquant_k3v4_nc;
  out.push_back(tq);
  Shape enc{"encoder_only x64", gqa(4, 4, 64, attn::DType::bfloat16)};
  enc.config.attn_type = attn::AttnType::encoder_only;
  out.push_back(enc);
  Shape bs{"block-sparse 16/2/2", gqa(8, 2, 64, attn::DType::bfloat16)};
  bs.config.use_block_sparse = true;
  bs.config.bs_block_size = 16;
  bs.config.bs_local_blocks = 2;
  bs.config.bs_vert_stride = 2;
  out.push_back(bs);
  Shape mla{"mla 8 x576/512", gqa(8, 1, 576, attn::DType::bfloat16)};
  mla.config.head_size_v = 512;
  mla.config.use_mla = true;
  mla.config.kv_lora_rank = 512;
  mla.config.qk_rope_head_dim = 64;
  mla.config.qk_nope_head_dim = 128;
  mla.config.v_head_dim = 128;
  out.push_back(mla);
  Shape sparse = mla;
  sparse.name = "mla top-32 sparse";
  sparse.config.use_sparse = true;
  sparse.config.index_topk = 32;
  out.push_back(sparse);
  for (Shape ds : {mla, sparse}) {
    ds.name = ds.config.use_sparse ? "mla top-32 fp8_ds_mla" : "mla fp8_ds_mla";
    ds.config.kv_cache_dtype = attn::KVCacheDType::fp8_ds_mla;
    out.push_back(ds);
  }
  return out;
}

struct Result {
  std::string backend, shape, status;  // status: pass / FAIL / error
  double max_abs_err = 0;
  Tolerance tol;
  std::string detail;
};

/// Runs `cfg` through `backend` and the reference on the same ragged batch and compares.
Result run_case(const attn::BackendDescriptor& backend, const attn::BackendDescriptor& ref, const Shape& shape,
                uint64_t seed) {
  Result r;
  r.backend = backend.name;
  r.shape = shape.name;
  r.status = "pass";
  Rng rng(seed);
  const attn::LayerConfig& cfg = shape.config;
  int32_t block_size = backend.preferred_block_size;
  if (!backend.caps.block_sizes.allows(block_size)) block_size = 16;
  // (context, new tokens): a prefill, a chunked prefill continuing a cached prefix, a decode.
  const bool decoder = cfg.attn_type == attn::AttnType::decoder;
  std::vector<std::pair<int, int>> seqs = decoder ? std::vector<std::pair<int, int>>{{0, 37}, {20, 5}, {50, 1}}
                                                  : std::vector<std::pair<int, int>>{{0, 37}, {0, 5}, {0, 19}};
  auto blocks_for = [&](int tokens) { return size_t((tokens + block_size - 1) / block_size); };
  size_t used = 0;
  for (auto [ctx, q] : seqs) used += blocks_for(ctx + q);
  const int32_t num_blocks = int32_t(used) + 2;  // two blocks no table uses
  std::vector<int32_t> pool(static_cast<size_t>(num_blocks));
  for (int32_t i = 0; i < num_blocks; ++i) pool[size_t(i)] = i;
  for (size_t i = pool.size() - 1; i > 0; --i) std::swap(pool[i], pool[rng.next() % (i + 1)]);

  std::vector<attn::SequenceSpec> prefix, step;
  size_t next = 0;
  for (auto [ctx, q] : seqs) {
    std::vector<int32_t> ids(pool.begin() + long(next), pool.begin() + long(next + blocks_for(ctx + q)));
    next += ids.size();
    if (ctx > 0) prefix.push_back({0, ctx, ids});
    step.push_back({ctx, q, ids});
  }
  const bool causal = cfg.causal();
  attn::LayerParams params;
  params.config = cfg;
  if (cfg.use_mla) params.scale = 1.0f / std::sqrt(float(cfg.qk_nope_head_dim + cfg.qk_rope_head_dim));
  if (cfg.has_sink) {
    for (int h = 0; h < cfg.num_heads; ++h) params.sinks.push_back(rng.uniform(-1.0f, 1.0f));
  }
  LayerRunner fast(backend, params, num_blocks, block_size);
  LayerRunner slow(ref, oracle_params(params), num_blocks, block_size, &params.config);
  if (!prefix.empty()) {
    // The cached prefix of the chunked / decode sequences, written like an earlier step.
    std::vector<attn::SequenceSpec> p = prefix;
    attn::BatchMetadata md = attn::BatchMetadata::build(p, block_size, num_blocks, causal);
    StepInputs in = random_inputs(cfg, md.num_tokens, rng);
    fast.write(md, in);
    slow.write(md, in);
  }
  attn::BatchMetadata md = attn::BatchMetadata::build(step, block_size, num_blocks, causal);
  StepInputs in = random_inputs(cfg, md.num_tokens, rng);
  attn::Buffer out = make_output(cfg, md.num_tokens), ref_out = make_output(cfg, md.num_tokens);
  const int64_t n = out.view().numel();
  for (int64_t i = 0; i < n; ++i) attn::store_from_float(out.data(), out.dtype(), i, std::nanf(""));  // unwritten → NaN
  fast.write(md, in);
  slow.write(md, in);
  Rng fast_rng(seed + 1), slow_rng(seed + 1);  // same top-k indices for both
  fast.forward(md, in, out.view(), fast_rng);
  slow.forward(md, in, ref_out.view(), slow_rng);
  r.tol = tolerance_for(cfg, ref_out);
  Comparison c = compare(out, ref_out, r.tol);
  r.max_abs_err = c.max_abs_err;
  if (!c.ok) {
    r.status = "FAIL";
    r.detail = c.first_failure;
  }
  return r;
}

}  // namespace

int cmd_check(const CheckOptions& o) {
  auto& registry = attn::Registry::instance();
  const attn::Platform& platform = attn::detect_cpu();
  auto ref = registry.find("reference");
  attn::require(ref != nullptr, "backend", "reference", "a registered 'reference' backend (the oracle)");
  std::vector<std::shared_ptr<const attn::BackendDescriptor>> todo;
  if (!o.backend.empty()) {
    auto d = registry.find(o.backend);
    attn::require(d != nullptr, "--backend", o.backend, "one of " + attn::join(registry.names()));
    todo.push_back(d);
  } else {
    todo = registry.backends();
  }

  std::vector<Result> results;
  std::vector<json> skipped;         // whole backends, or one shape of a backend, with the reason
  std::vector<std::string> checked;  // backends with at least one shape compared to the reference
  for (const auto& d : todo) {
    if (d->name == ref->name) {
      skipped.push_back({{"backend", d->name}, {"why", "the oracle every other backend is checked against"}, {"checked", false}});
      continue;
    }
    if (d->caps.attention_free) {
      skipped.push_back({{"backend", d->name}, {"why", "attention-free: it has no forward to check"}, {"checked", false}});
      continue;
    }
    std::string why;
    if (!registry.ensure_module(*d, why)) {
      skipped.push_back({{"backend", d->name}, {"why", why}, {"checked", false}});
      continue;
    }
    int ran = 0;
    uint64_t seed = o.seed;
    for (const auto& s : shapes()) {
      ++seed;
      if (!attn::evaluate(*d, s.config, platform).valid) continue;  // not this backend's shape
      auto ref_reasons = attn::evaluate(*ref, oracle_config(s.config), platform).reasons;
      if (!ref_reasons.empty()) {
        skipped.push_back({{"backend", d->name}, {"shape", s.name}, {"why", "reference cannot serve: " + ref_reasons[0].to_string()}});
        continue;
      }
      ++ran;
      try {
        results.push_back(run_case(*d, *ref, s, seed));
      } catch (const std::exception& e) {
        Result r;
        r.backend = d->name;
        r.shape = s.name;
        r.status = "error";
        r.detail = e.what();
        results.push_back(r);
      }
    }
    if (ran == 0) {
      // Not checked at all: say so, and why, rather than letting `passed` cover it.
      std::string why_none = "serves none of the check shapes on this machine";
      for (const auto& s : skipped)
        if (s["backend"] == d->name && s.contains("shape")) why_none = "no check shape it serves can be checked: " + s["why"].get<std::string>();
      skipped.push_back({{"backend", d->name}, {"why", why_none}, {"checked", false}});
    } else {
      checked.push_back(d->name);
    }
  }

  // `passed` speaks for the backends in `checked` only; skipped ones are listed as not checked.
  bool ok = true;
  for (const auto& r : results) ok = ok && r.status == "pass";
  std::vector<std::string> not_checked;
  for (const auto& s : skipped)
    if (!s.contains("shape") && s["backend"] != ref->name) not_checked.push_back(s["backend"].get<std::string>());
  const std::vector<KvQualityRow> quality = kv_quality(o.seed);
  if (o.json) {
    json j{{"platform", platform.to_string()}, {"seed", o.seed}, {"passed", ok}, {"checked", checked},
           {"not_checked", not_checked}, {"results", json::array()}, {"skipped", skipped}, {"kv_quality", json::array()}};
    for (const KvQualityRow& q : quality)
      j["kv_quality"].push_back({{"kv_cache_dtype", attn::to_string(q.kv)}, {"values", q.values}, {"rel_max_err", q.rel_max_err},
                                 {"rel_rms_err", q.rel_rms_err}, {"cosine", q.cosine}});
    for (const auto& r : results) {
      json rj{{"backend", r.backend}, {"shape", r.shape}, {"status", r.status}, {"max_abs_err", r.max_abs_err},
              {"atol", r.tol.atol}, {"rtol", r.tol.rtol}};
      if (!r.detail.empty()) rj["detail"] = r.detail;
      j["results"].push_back(rj);
    }
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf("platform %s, seed %llu\n\n", platform.to_string().c_str(), (unsigned long long)o.seed);
    std::printf("%-14s %-22s %-6s %-11s %s\n", "backend", "shape", "result", "max |err|", "tolerance");
    for (const auto& r : results) {
      std::printf("%-14s %-22s %-6s %-11.3g %.3g + %.3g*|ref|\n", r.backend.c_str(), r.shape.c_str(), r.status.c_str(),
                  r.max_abs_err, r.tol.atol, r.tol.rtol);
      if (!r.detail.empty()) std::printf("    %s\n", r.detail.c_str());
    }
    for (const auto& s : skipped) {
      std::printf("skipped %s%s: %s\n", s["backend"].get<std::string>().c_str(),
                  s.contains("shape") ? (" / " + s["shape"].get<std::string>()).c_str() : "", s["why"].get<std::string>().c_str());
    }
    std::printf("\nquantized caches against a bf16 cache (reference backend, Llama-3.1-8B attention, 1024-token context):\n");
    std::printf("  %-20s %-17s %12s %12s %10s\n", "kv_cache_dtype", "K/V values", "max err/max", "rms err/rms", "cosine");
    for (const KvQualityRow& q : quality)
      std::printf("  %-20s %-17s %12.2e %12.2e %10.6f\n", std::string(attn::to_string(q.kv)).c_str(), q.values.c_str(), q.rel_max_err,
                  q.rel_rms_err, q.cosine);
    std::printf("\n%s for %s", ok ? "all checks passed" : "SOME CHECKS FAILED", checked.empty() ? "(none)" : attn::join(checked).c_str());
    if (!not_checked.empty()) std::printf("; NOT checked (skipped, see above): %s", attn::join(not_checked).c_str());
    std::printf("\n");
  }
  return ok ? 0 : 1;
}

}  // namespace attn_cli
