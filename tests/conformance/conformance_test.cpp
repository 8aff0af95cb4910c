// The conformance suite: every registered dense CPU backend, on this machine, against the
// independent fp64 reference (tests/support), on cases generated from its own capabilities;
// and negative tests: every feature it does NOT declare makes a forced selection fail with that
// field among the reasons. MLA / sparse / block-sparse / attention-free backends have their own
// oracles and are skipped here (their negative tests still run).
//
// Sizes: default = every sampled value of each dimension; ATTN_TEST_QUICK=1 = each dimension
// once (the sanitizer CI run); the ConformanceLong suite (dtype x kv dtype x head size product,
// bigger batches) is skipped unless ATTN_TEST_LONG=1:
//   ATTN_TEST_LONG=1 build/tests/attn_tests --gtest_filter='*Long*'
// Seeds are fresh per run and printed on failure; ATTN_TEST_SEED=<seed> replays a run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include "attn/attn.hpp"
#include "conformance/case_generator.hpp"

namespace {

using namespace attn;
using namespace attn::test;

std::vector<std::string> backend_names(bool dense) {
  std::vector<std::string> out;
  for (auto& d : Registry::instance().backends())
    if (is_dense_cpu_backend(*d) == dense) out.push_back(d->name);
  return out;
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

// Skips (with the reason) a backend that cannot run on this machine.
std::shared_ptr<const BackendDescriptor> runnable_here(const std::string& name) {
  auto d = Registry::instance().find(name);
  if (!d) return nullptr;
  std::string why;
  for (auto& r : check_capabilities(d->caps, LayerConfig{}, detect_cpu()))
    if (r.field == ReasonField::platform || r.field == ReasonField::cpu_features) why = r.to_string();
  if (why.empty() && !Registry::instance().ensure_module(*d, why)) why = "module " + d->module + ": " + why;
  if (!why.empty()) return nullptr;
  return Registry::instance().find(name);  // the module may have provided the factory
}

void run_sweep(const std::string& name, SweepSize size) {
  auto d = runnable_here(name);
  if (!d) GTEST_SKIP() << name << " does not run on " << detect_cpu().to_string();
  const uint64_t seed = fresh_seed();
  const auto cases = generate_cases(*d, detect_cpu(), size, seed);
  ASSERT_FALSE(cases.empty()) << name << ": its capabilities generated no runnable case";
  int failures = 0;
  std::map<std::string, double> used;  // worst fraction of the tolerance used, by dtype pair
  for (const auto& c : cases) {
    CompareResult r;
    try {
      r = check_backend(c.spec, name);
    } catch (const std::exception& e) {
      r.ok = false;
      r.message = std::string("threw: ") + e.what();
    }
    const std::string pair = std::string(to_string(c.spec.config.dtype)) + "/" + std::string(to_string(c.spec.config.kv_cache_dtype));
    used[pair] = std::max(used[pair], r.tolerance_used);
    if (!r.ok) {
      ADD_FAILURE() << name << " [" << c.label << "]: " << r.message << "\n  " << c.spec.describe()
                    << "\n  " << r.tolerance_used << " of the tolerance used; replay the whole sweep with ATTN_TEST_SEED=" << seed;
      if (++failures >= 5) break;  // enough to diagnose; keeps the log readable
    }
  }
  ::testing::Test::RecordProperty("cases", int(cases.size()));
  std::printf("[ conformance ] %s: %zu cases, base seed %llu; worst fraction of the tolerance used:", name.c_str(),
              cases.size(), (unsigned long long)seed);
  for (const auto& [pair, u] : used) std::printf(" %s %.3g", pair.c_str(), u);
  std::printf("\n");
}

class Conformance : public ::testing::TestWithParam<std::string> {};

TEST_P(Conformance, MatchesFp64ReferenceOnCasesFromItsCapabilities) { run_sweep(GetParam(), sweep_from_env(SweepSize::normal)); }

TEST_P(Conformance, SameInputsGiveBitwiseSameOutputs) {
  auto d = runnable_here(GetParam());
  if (!d) GTEST_SKIP() << GetParam() << " does not run here";
  const auto cases = generate_cases(*d, detect_cpu(), SweepSize::quick, fresh_seed());
  ASSERT_FALSE(cases.empty());
  Case c = make_case(cases.front().spec, GetParam());
  run_forward(c);
  const auto first = output_values(c);
  run_forward(c);  // poisons the output again first
  EXPECT_EQ(output_values(c), first) << cases.front().spec.describe();
}

TEST_P(Conformance, MisalignedQueryAndOutputGiveCorrectResults) {
  // q and out one element past a 64-byte boundary: kernels must not assume aligned rows.
  auto d = runnable_here(GetParam());
  if (!d) GTEST_SKIP() << GetParam() << " does not run here";
  const auto cases = generate_cases(*d, detect_cpu(), SweepSize::quick, fresh_seed());
  ASSERT_FALSE(cases.empty());
  Case c = make_case(cases.back().spec, GetParam());
  const TensorView q = c.q.view(), out = c.out.view();
  const std::size_t es = dtype_size(q.dtype), qn = std::size_t(q.numel()), on = std::size_t(out.numel());
  Buffer q_raw(q.dtype, {int64_t(qn) + 1}), out_raw(out.dtype, {int64_t(on) + 1});
  std::memcpy(static_cast<char*>(q_raw.data()) + es, q.data, qn * es);
  for (std::size_t i = 0; i <= on; ++i) store_from_float(out_raw.data(), out.dtype, int64_t(i), std::nanf(""));
  TensorView q_off = q, out_off = out;
  q_off.data = static_cast<char*>(q_raw.data()) + es;
  out_off.data = static_cast<char*>(out_raw.data()) + es;
  c.impl->forward(q_off, *c.cache, c.md, out_off);
  std::memcpy(c.out.data(), out_off.data, on * es);
  EXPECT_TRUE(std::isnan(load_as_float(out_raw.data(), out.dtype, 0))) << "wrote before the output";
  const auto r = compare_output(c, reference_attention(c));
  EXPECT_TRUE(r.ok) << r.message << "\n" << cases.back().spec.describe();
}

INSTANTIATE_TEST_SUITE_P(Backends, Conformance, ::testing::ValuesIn(backend_names(true)), param_name);

class ConformanceLong : public ::testing::TestWithParam<std::string> {};

TEST_P(ConformanceLong, FullProductSweep) {
  const char* on = std::getenv("ATTN_TEST_LONG");
  if (!on || std::string(on) == "0") GTEST_SKIP() << "set ATTN_TEST_LONG=1 to run the long sweep";
  run_sweep(GetParam(), SweepSize::long_);
}

INSTANTIATE_TEST_SUITE_P(Backends, ConformanceLong, ::testing::ValuesIn(backend_names(true)), param_name);

// --- negative tests: undeclared features must be refused, naming the field ---

struct Flip {
  std::string field;   // the reason field the backend must give
  std::string label;
  std::function<void(LayerConfig&)> apply;
};

// Every way to ask `caps` for something it does not declare.
std::vector<Flip> undeclared(const Capabilities& caps, const LayerConfig& base) {
  std::vector<Flip> f;
  auto flag = [&](bool declared, const char* field, std::function<void(LayerConfig&)> apply) {
    if (!declared) f.push_back({field, field, std::move(apply)});
  };
  flag(caps.sinks, "has_sink", [](LayerConfig& c) { c.has_sink = true; });
  flag(caps.sliding_window, "sliding_window", [](LayerConfig& c) { c.sliding_window = 128; });
  flag(caps.soft_cap, "logits_soft_cap", [](LayerConfig& c) { c.logits_soft_cap = 30.0f; });
  flag(caps.alibi, "use_alibi", [](LayerConfig& c) { c.use_alibi = true; });
  flag(caps.non_causal, "use_non_causal", [](LayerConfig& c) { c.use_non_causal = true; });
  flag(caps.batch_invariance, "use_batch_invariant", [](LayerConfig& c) { c.use_batch_invariant = true; });
  flag(caps.kv_connector, "use_kv_connector", [](LayerConfig& c) { c.use_kv_connector = true; });
  flag(caps.mm_prefix, "use_mm_prefix", [](LayerConfig& c) { c.use_mm_prefix = true; });
  flag(caps.per_head_quant_scales, "use_per_head_quant_scales", [](LayerConfig& c) { c.use_per_head_quant_scales = true; });
  flag(caps.mla, "use_mla", [](LayerConfig& c) { c.use_mla = true; c.kv_lora_rank = c.head_size; });
  flag(caps.sparse, "use_sparse", [](LayerConfig& c) { c.use_sparse = true; c.index_topk = 64; });
  flag(caps.block_sparse, "use_block_sparse",
       [](LayerConfig& c) { c.use_block_sparse = true; c.bs_block_size = 16; c.bs_local_blocks = 1; c.bs_vert_stride = 2; });
  flag(caps.distinct_head_size_v, "head_size_v", [](LayerConfig& c) { c.head_size_v = c.head_size + 8; });
  f.push_back({"is_attention_free", "is_attention_free", [](LayerConfig& c) { c.is_attention_free = true; }});
  for (AttnType t : all_attn_types())
    if (std::find(caps.attn_types.begin(), caps.attn_types.end(), t) == caps.attn_types.end())
      f.push_back({"attn_type", "attn_type=" + std::string(to_string(t)), [t](LayerConfig& c) { c.attn_type = t; }});
  for (DType t : {DType::float32, DType::float16, DType::bfloat16})
    if (std::find(caps.dtypes.begin(), caps.dtypes.end(), t) == caps.dtypes.end())
      f.push_back({"dtype", "dtype=" + std::string(to_string(t)), [t](LayerConfig& c) { c.dtype = t; }});
  for (KVCacheDType k : all_kv_cache_dtypes())
    if (std::find(caps.kv_cache_dtypes.begin(), caps.kv_cache_dtypes.end(), k) == caps.kv_cache_dtypes.end())
      f.push_back({"kv_cache_dtype", "kv_cache_dtype=" + std::string(to_string(k)), [k](LayerConfig& c) { c.kv_cache_dtype = k; }});
  for (int h = 1; h <= 1024; ++h)
    if (!caps.head_sizes.allows(h) && h != base.head_size) {
      f.push_back({"head_size", "head_size=" + std::to_string(h), [h](LayerConfig& c) { c.head_size = h; c.head_size_v = 0; }});
      break;
    }
  for (int b = 1; b <= 1024; ++b)
    if (!caps.block_sizes.allows(b)) {
      f.push_back({"block_size", "block_size=" + std::to_string(b), [b](LayerConfig& c) { c.block_size = b; }});
      break;
    }
  return f;
}

TEST_P(Conformance, RefusesEveryUndeclaredFeatureNamingTheField) {
  auto d = runnable_here(GetParam());
  if (!d) GTEST_SKIP() << GetParam() << " does not run here";
  const auto cases = generate_cases(*d, detect_cpu(), SweepSize::quick, 1);
  ASSERT_FALSE(cases.empty());
  const LayerConfig base = cases.front().spec.config;  // a config the backend serves
  SelectOptions forced;
  forced.use_env = false;
  forced.backend = GetParam();
  ASSERT_NO_THROW(select(base, forced));
  for (const Flip& flip : undeclared(d->caps, base)) {
    LayerConfig cfg = base;
    flip.apply(cfg);
    try {
      select(cfg, forced);
      ADD_FAILURE() << GetParam() << " accepted undeclared " << flip.label << ": " << cfg.to_string();
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(flip.field + "="), std::string::npos) << flip.label << ": " << msg;
      EXPECT_NE(msg.find("Selected backend " + GetParam()), std::string::npos) << msg;
    }
  }
}

// Backends that are not dense CPU attention: their negative side on this machine.
class NonDenseBackends : public ::testing::TestWithParam<std::string> {};

TEST_P(NonDenseBackends, RefuseAPlainDecoderLayerNamingTheField) {
  auto d = Registry::instance().find(GetParam());
  ASSERT_NE(d, nullptr);
  SelectOptions forced;
  forced.use_env = false;
  forced.backend = GetParam();
  LayerConfig plain;
  plain.head_size = 64;
  const auto reasons = evaluate(*d, plain, detect_cpu()).reasons;
  ASSERT_FALSE(reasons.empty()) << GetParam() << " claims to serve a plain dense layer";
  try {
    select(plain, forced);
    ADD_FAILURE() << GetParam() << " accepted a plain decoder layer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(reasons.front().field.name() + "="), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, NonDenseBackends, ::testing::ValuesIn(backend_names(false)), param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(NonDenseBackends);

}  // namespace
