#include "conformance/case_generator.hpp"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <random>
#include <string_view>

#include "attn/selector.hpp"
#include "selector/selector_test_util.hpp"

namespace attn::test {
namespace {

template <typename T>
bool contains(const std::vector<T>& v, const T& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// KV-cache dtypes the generic cache and oracle store densely.
bool dense_kv(KVCacheDType k) {
  switch (k) {
    case KVCacheDType::auto_: case KVCacheDType::float16: case KVCacheDType::bfloat16:
    case KVCacheDType::fp8: case KVCacheDType::fp8_e4m3: case KVCacheDType::fp8_e5m2: case KVCacheDType::fp8_inc: return true;
    case KVCacheDType::int8_per_token_head: case KVCacheDType::fp8_per_token_head: return true;
    default: return false;
  }
}

bool is_fp8(KVCacheDType k) {
  return k == KVCacheDType::fp8 || k == KVCacheDType::fp8_e4m3 || k == KVCacheDType::fp8_e5m2 || k == KVCacheDType::fp8_inc;
}

// Evenly spaced picks that keep the first and last element.
std::vector<int> spread(const std::vector<int>& v, int n) {
  if (n <= 0 || int(v.size()) <= n) return v;
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back(v[std::size_t(n == 1 ? 0 : int64_t(i) * (int64_t(v.size()) - 1) / (n - 1))]);
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// A ragged batch: decode, prefill and chunked-prefill sequences with odd lengths. Encoder
// layers see whole sequences (no cached context).
std::vector<SeqShape> ragged_batch(std::mt19937_64& rng, SweepSize size, bool encoder) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int scale = size == SweepSize::long_ ? 4 : 1;
  std::vector<SeqShape> seqs;
  if (encoder) {
    const int n = size == SweepSize::long_ ? 6 : 3;
    for (int i = 0; i < n; ++i) seqs.push_back({0, pick(1, 23 * scale)});
    return seqs;
  }
  seqs.push_back({pick(1, 70 * scale), 1});            // decode
  seqs.push_back({0, pick(2, 13 * scale)});            // prefill
  seqs.push_back({pick(1, 40 * scale), pick(2, 9)});   // chunked prefill
  seqs.push_back({pick(0, 3), 1});                     // decode with almost no context
  if (size == SweepSize::long_)
    for (int i = 0; i < 4; ++i) seqs.push_back({pick(0, 300), pick(1, 40)});
  std::shuffle(seqs.begin(), seqs.end(), rng);
  return seqs;
}

// Contexts past one KV split (cpu_flash splits every 1024 keys): two decode-like rows that take
// the split-KV path and a 40-token chunk that does not. Encoder layers see whole sequences.
std::vector<SeqShape> beyond_one_split(std::mt19937_64& rng, bool encoder) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  if (encoder) return {{0, pick(1030, 1300)}};
  return {{pick(1100, 2500), 1}, {pick(1030, 1600), pick(2, 4)}, {pick(1025, 1200), 40}};
}

// The production dtype (bf16 when declared) with every declared feature over long contexts, in
// the default suite: the features meet the split-KV path and the merge. Quick runs keep the
// plain case and all features combined.
void add_beyond_one_split(const Capabilities& caps, const std::vector<DType>& dtypes, SweepSize size,
                          std::mt19937_64& rng, const std::function<void(const std::string&, const std::function<void(CaseSpec&)>&)>& add) {
  const DType dt = contains(dtypes, DType::bfloat16) ? DType::bfloat16 : dtypes.front();
  const std::string tag = " beyond one split " + std::string(to_string(dt));
  std::vector<std::pair<std::string, std::function<void(CaseSpec&)>>> features;
  if (caps.sinks) features.push_back({"sinks", [](CaseSpec& s) { s.config.has_sink = true; }});
  const int window = std::uniform_int_distribution<int>(1030, 1800)(rng);  // wider than a split
  if (caps.sliding_window) features.push_back({"sliding_window", [=](CaseSpec& s) { s.config.sliding_window = window; }});
  if (caps.soft_cap) features.push_back({"soft_cap", [](CaseSpec& s) { s.config.logits_soft_cap = 4.0f; }});
  if (caps.alibi) features.push_back({"alibi", [](CaseSpec& s) { s.config.use_alibi = true; }});
  if (caps.non_causal) features.push_back({"non_causal", [](CaseSpec& s) { s.config.use_non_causal = true; }});
  if (caps.mm_prefix) features.push_back({"mm_prefix", [](CaseSpec& s) { s.config.use_mm_prefix = true, s.mm_prefix = true; }});
  auto long_case = [&](const std::string& label, const std::function<void(CaseSpec&)>& mutate) {
    add(label + tag, [&](CaseSpec& s) {
      s.config.dtype = dt;
      mutate(s);
      const AttnType t = s.config.attn_type;
      s.seqs = beyond_one_split(rng, t == AttnType::encoder || t == AttnType::encoder_only);
    });
  };
  long_case("plain", [](CaseSpec&) {});
  if (size != SweepSize::quick)
    for (const auto& [name, f] : features) long_case(name, f);
  if (features.size() > 1)
    long_case("all features", [&](CaseSpec& s) {
      for (const auto& [name, f] : features) f(s);
    });
}

}  // namespace

SweepSize sweep_from_env(SweepSize fallback) {
  const char* q = std::getenv("ATTN_TEST_QUICK");
  return q && *q && std::string_view(q) != "0" ? SweepSize::quick : fallback;
}

std::vector<int> sample_sizes(const SizeRule& rule, int max_count, int cap) {
  std::vector<int> c;
  switch (rule.kind) {
    case SizeRule::Kind::any: c = {1, 3, 16, 17, 64, 72, 80, 128, 130, 256}; break;
    case SizeRule::Kind::one_of: c = rule.values; break;
    case SizeRule::Kind::range:  // every value (up to the cap); spread() below keeps both ends
      for (int x = rule.lo; x <= std::min(rule.hi, cap) && c.size() < 4096; x += std::max(rule.step, 1)) c.push_back(x);
      break;
    case SizeRule::Kind::multiple_of:
      for (int b : rule.values) c.insert(c.end(), {b, 2 * b, 3 * b});
      break;
  }
  c.insert(c.end(), rule.extra.begin(), rule.extra.end());
  std::vector<int> ok;
  for (int x : c) if (x > 0 && x <= cap && rule.allows(x)) ok.push_back(x);
  std::sort(ok.begin(), ok.end());
  ok.erase(std::unique(ok.begin(), ok.end()), ok.end());
  if (ok.empty())  // everything allowed is above the cap: take the smallest allowed size
    for (int x = 1; x <= 4096; ++x) if (rule.allows(x)) { ok.push_back(x); break; }
  return spread(ok, max_count);
}

bool is_dense_cpu_backend(const BackendDescriptor& d) {
  const Capabilities& c = d.caps;
  return !c.mla && !c.sparse && !c.block_sparse && !c.attention_free &&
         contains(c.platforms, PlatformKind::cpu);
}

std::vector<GeneratedCase> generate_cases(const BackendDescriptor& d, const Platform& platform, SweepSize size,
                                          uint64_t base_seed) {
  const Capabilities& caps = d.caps;
  std::mt19937_64 rng(base_seed);
  const bool quick = size == SweepSize::quick, longer = size == SweepSize::long_;

  std::vector<DType> dtypes;
  for (DType t : {DType::float32, DType::float16, DType::bfloat16}) if (contains(caps.dtypes, t)) dtypes.push_back(t);
  std::vector<KVCacheDType> kv_dtypes;
  for (KVCacheDType k : caps.kv_cache_dtypes) if (dense_kv(k)) kv_dtypes.push_back(k);
  const std::vector<int> heads = sample_sizes(caps.head_sizes, quick ? 2 : longer ? 64 : 6, 320);
  const std::vector<int> blocks = sample_sizes(caps.block_sizes, quick ? 1 : longer ? 6 : 4, 64);
  if (dtypes.empty() || kv_dtypes.empty() || heads.empty() || blocks.empty()) return {};

  LayerConfig base;
  base.num_heads = 4;
  base.num_kv_heads = 2;
  base.dtype = dtypes.front();
  base.kv_cache_dtype = kv_dtypes.front();
  base.head_size = heads[heads.size() / 2];

  std::vector<GeneratedCase> out;
  auto add = [&](const std::string& label, const std::function<void(CaseSpec&)>& mutate) {
    CaseSpec s;
    s.config = base;
    s.block_size = blocks[out.size() % blocks.size()];  // rotate so every case family meets several
    s.seed = base_seed + out.size() + 1;
    s.alias_prefix = (out.size() % 3) == 1;  // every third case shares sequence 0's prefix blocks
    mutate(s);
    const AttnType t = s.config.attn_type;
    if (s.seqs.empty()) s.seqs = ragged_batch(rng, size, t == AttnType::encoder || t == AttnType::encoder_only);
    if (evaluate(d, s.config, platform).valid) out.push_back({s, label});
  };
  auto each_dtype = [&](int n, const std::string& label, const std::function<void(CaseSpec&)>& mutate) {
    for (int i = 0; i < std::min<int>(n, int(dtypes.size())); ++i)
      add(label + " " + std::string(to_string(dtypes[std::size_t(i)])), [&](CaseSpec& s) {
        s.config.dtype = dtypes[std::size_t(i)];
        mutate(s);
      });
  };
  const int feature_dtypes = quick ? 1 : longer ? 3 : 2;

  // Sizes and precisions.
  if (longer) {
    for (DType t : dtypes)
      for (KVCacheDType k : kv_dtypes)
        for (int h : heads)
          add("head_size=" + std::to_string(h) + " " + std::string(to_string(t)) + "/" + std::string(to_string(k)),
              [&](CaseSpec& s) { s.config.dtype = t; s.config.kv_cache_dtype = k; s.config.head_size = h; });
  } else {
    for (std::size_t i = 0; i < heads.size(); ++i)
      add("head_size=" + std::to_string(heads[i]), [&](CaseSpec& s) {
        s.config.head_size = heads[i];
        s.config.dtype = dtypes[i % dtypes.size()];
      });
    for (std::size_t i = 0; i < dtypes.size(); ++i)
      for (std::size_t j = 0; j < kv_dtypes.size(); ++j) {
        if (quick && j != i % kv_dtypes.size()) continue;
        add(std::string(to_string(dtypes[i])) + "/kv " + std::string(to_string(kv_dtypes[j])), [&](CaseSpec& s) {
          s.config.dtype = dtypes[i];
          s.config.kv_cache_dtype = kv_dtypes[j];
          s.config.head_size = heads[(i + j) % heads.size()];
        });
      }
  }
  for (int b : blocks) add("block_size=" + std::to_string(b), [&](CaseSpec& s) { s.block_size = b; });

  // GQA group sizes 1, 4, 8 and MQA.
  for (const auto& [heads_q, heads_kv] : std::vector<std::pair<int, int>>{{4, 4}, {8, 2}, {16, 2}, {8, 1}}) {
    const int h = heads_q, kv = heads_kv;  // plain copies: clang 14 lambdas cannot capture bindings
    if (quick && h == 16) continue;
    add("gqa " + std::to_string(h) + ":" + std::to_string(kv), [&](CaseSpec& s) {
      s.config.num_heads = h;
      s.config.num_kv_heads = kv;
    });
  }

  // Features the backend declares.
  if (caps.sinks) each_dtype(feature_dtypes, "sinks", [](CaseSpec& s) { s.config.has_sink = true; });
  if (caps.sliding_window) {
    each_dtype(feature_dtypes, "sliding_window", [&](CaseSpec& s) {
      s.config.sliding_window = std::uniform_int_distribution<int>(2, 24)(rng);
    });
    add("sliding_window=1", [](CaseSpec& s) { s.config.sliding_window = 1; });
  }
  if (caps.soft_cap)
    each_dtype(feature_dtypes, "soft_cap", [](CaseSpec& s) {
      s.config.logits_soft_cap = 4.0f;
      s.value_range = 3.0f;  // logits large enough for tanh to bend them
    });
  if (caps.alibi) each_dtype(feature_dtypes, "alibi", [](CaseSpec& s) { s.config.use_alibi = true; });
  if (caps.non_causal) each_dtype(feature_dtypes, "non_causal", [](CaseSpec& s) { s.config.use_non_causal = true; });
  if (caps.mm_prefix)
    each_dtype(feature_dtypes, "mm_prefix", [](CaseSpec& s) { s.config.use_mm_prefix = true, s.mm_prefix = true; });
  for (AttnType t : caps.attn_types)
    if (t != AttnType::decoder)
      add("attn_type=" + std::string(to_string(t)), [&](CaseSpec& s) { s.config.attn_type = t; });
  if (caps.distinct_head_size_v)
    add("head_size_v != head_size", [&](CaseSpec& s) { s.config.head_size_v = std::max(1, s.config.head_size / 2 + 3); });
  if (caps.per_head_quant_scales)
    for (KVCacheDType k : kv_dtypes)
      if (is_fp8(k)) {
        add("per-head fp8 scales " + std::string(to_string(k)), [&](CaseSpec& s) {
          s.config.kv_cache_dtype = k;
          s.config.use_per_head_quant_scales = true;
          s.per_head_scales = true;
        });
        if (quick) break;
      }
  // Per-token-head caches: each slot's scales meet every io dtype, a wide GQA group (the decode
  // kernels' 4-row tiles), and long contexts with windows and sinks (split KV, partly visible chunks).
  for (KVCacheDType k : kv_dtypes)
    if (has_token_head_scales(k)) {
      const std::string name = "per-token-head " + std::string(to_string(k));
      for (DType t : dtypes) {
        add(name + " " + std::string(to_string(t)), [&](CaseSpec& s) {
          s.config.kv_cache_dtype = k;
          s.config.dtype = t;
          s.config.num_heads = 8;
        });
        if (quick) break;
      }
      const int window = std::uniform_int_distribution<int>(40, 1500)(rng);
      add(name + " long, window, sinks", [&](CaseSpec& s) {
        s.config.kv_cache_dtype = k;
        s.config.dtype = contains(dtypes, DType::bfloat16) ? DType::bfloat16 : dtypes.front();
        if (caps.sliding_window) s.config.sliding_window = window;
        if (caps.sinks) s.config.has_sink = true;
        s.seqs = beyond_one_split(rng, false);
      });
    }
  // The packed formats (int4_per_token_head, nvfp4, turboquant): the head sizes their width rule
  // allows (kv_width_unmet: powers of two, multiples of 16, ...), every io dtype, GQA 8:2, per-head
  // global scales where the format has them (nvfp4), and a long context with a window and sinks.
  for (KVCacheDType k : packed_kv_cache_dtypes()) {
    if (!contains(caps.kv_cache_dtypes, k)) continue;
    std::vector<int> sizes;
    for (int h : {8, 16, 32, 64, 80, 96, 128, 256})
      if (caps.head_sizes.allows(h) && kv_width_unmet(k, h).empty()) sizes.push_back(h);
    if (sizes.empty()) continue;
    const std::string name(to_string(k));
    for (std::size_t i = 0; i < dtypes.size(); ++i) {
      add(name + " " + std::string(to_string(dtypes[i])), [&](CaseSpec& s) {
        s.config.kv_cache_dtype = k;
        s.config.dtype = dtypes[i];
        s.config.num_heads = 8;
        s.config.head_size = sizes[(i + out.size()) % sizes.size()];
      });
      if (quick) break;
    }
    if (is_nvfp4(k) && caps.per_head_quant_scales)
      add(name + " per-head global scales", [&](CaseSpec& s) {
        s.config.kv_cache_dtype = k;
        s.config.head_size = sizes.front();
        s.config.use_per_head_quant_scales = true;
        s.per_head_scales = true;
      });
    const int window = std::uniform_int_distribution<int>(40, 1500)(rng);
    add(name + " long, window, sinks", [&](CaseSpec& s) {
      s.config.kv_cache_dtype = k;
      s.config.dtype = contains(dtypes, DType::bfloat16) ? DType::bfloat16 : dtypes.front();
      s.config.head_size = sizes.back();
      if (caps.sliding_window) s.config.sliding_window = window;
      if (caps.sinks) s.config.has_sink = true;
      s.seqs = beyond_one_split(rng, false);
    });
  }
  if (caps.batch_invariance) add("use_batch_invariant", [](CaseSpec& s) { s.config.use_batch_invariant = true; });
  if (caps.sinks && caps.sliding_window && caps.soft_cap)
    add("sinks+window+soft_cap (gpt-oss / gemma style)", [](CaseSpec& s) {
      s.config.has_sink = true;
      s.config.sliding_window = 7;
      s.config.logits_soft_cap = 6.0f;
    });
  add_beyond_one_split(caps, dtypes, size, rng, add);
  add("explicit scale, contiguous tables", [](CaseSpec& s) {
    s.scale = 0.37f;
    s.permute_blocks = false;
    s.spare_blocks = 0;
  });
  return out;
}

}  // namespace attn::test
