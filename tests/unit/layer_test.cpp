// attn::Layer (one layer's decision, descriptor and implementation) and attn::StepPlans (one
// plan per layer group per step): what every host builds on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "attn/layer.hpp"
#include "attn/registry.hpp"
#include "support/test_support.hpp"

namespace attn::test {
namespace {

LayerParams llama_params(int threads = 1) {
  LayerParams p;
  p.config.num_heads = 8, p.config.num_kv_heads = 2, p.config.head_size = 64;
  p.config.dtype = DType::bfloat16;
  p.num_threads = threads;
  return p;
}

TEST(Layer, HoldsTheSelectorsChoiceAndWhatItsBackendReads) {
  const LayerParams p = llama_params();
  const Layer layer(p);
  const Decision d = select(p.config);
  EXPECT_EQ(layer.backend(), d.backend);
  EXPECT_EQ(layer.decision().backend, d.backend);
  EXPECT_EQ(layer.descriptor().name, d.backend);
  EXPECT_EQ(layer.impl().backend_name(), d.backend);
  EXPECT_EQ(layer.block_size(), d.block_size);
  EXPECT_EQ(layer.device(), DeviceKind::cpu);
  // What runs is what the decision names (attn plan prints the decision's variant).
  EXPECT_EQ(layer.variant(), d.variant);
  EXPECT_EQ(layer.cache_spec(10), layer.descriptor().cache_spec(p.config, 10, d.block_size));
  EXPECT_EQ(layer.cache_spec(10, 32).block_size, 32);
  const KVCacheSpec spec = layer.cache_spec(4);
  EXPECT_EQ(layer.out_shape(5, spec), (std::vector<int64_t>{5, 8, 64}));
  EXPECT_NE(layer.to_string().find("backend='" + d.backend + "'"), std::string::npos) << layer.to_string();
}

TEST(Layer, OnBackendRunsTheNamedBackendOrSaysWhyItCannot) {
  EXPECT_EQ(Layer::on_backend("reference", llama_params()).backend(), "reference");
  try {
    Layer::on_backend("cpu_mla", llama_params());  // not an MLA layer
    FAIL() << "cpu_mla accepted a dense layer";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cpu_mla"), std::string::npos) << what;
    EXPECT_NE(what.find("use_mla"), std::string::npos) << what;
  }
  try {
    Layer::on_backend("no_such_backend", llama_params());
    FAIL() << "an unknown backend was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("reference"), std::string::npos) << e.what();  // lists the known names
  }
}

TEST(Registry, CreateBuildsOnlyWhatTheDescriptorServes) {
  LayerParams p = llama_params();
  p.config.head_size = 320;  // beyond cpu_flash's head sizes (1..256)
  try {
    Registry::instance().create("cpu_flash", p);
    FAIL() << "cpu_flash was built for a head size it does not declare";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("backend cpu_flash cannot serve this layer"), std::string::npos) << what;
    EXPECT_NE(what.find("head_size=320"), std::string::npos) << what;
  }
  EXPECT_EQ(Registry::instance().create("reference", p)->backend_name(), "reference");
}

TEST(Layer, ParamsAreCheckedBeforeSelection) {
  LayerParams p = llama_params();
  p.config.has_sink = true;
  p.sinks = {0.5f};  // one sink for 8 heads
  try {
    Layer layer(p);
    FAIL() << "a sink list of the wrong length was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sinks"), std::string::npos) << e.what();
  }
}

TEST(Layer, MovesKeepTheImplementation) {
  Layer a = Layer::on_backend("reference", llama_params());
  const AttentionImpl* impl = &a.impl();
  Layer b = std::move(a);
  EXPECT_EQ(&b.impl(), impl);
  EXPECT_EQ(b.backend(), "reference");
}

TEST(StepPlans, LayersOfOneGroupShareAPlanAndOthersGetTheirOwn) {
  CaseSpec spec;
  spec.config = llama_params().config;
  spec.seqs = {{37, 1}, {0, 19}, {70, 3}};
  spec.seed = fresh_seed();
  Case c = make_case(spec, "cpu_flash");
  const Layer a = Layer::on_backend("cpu_flash", c.params), b = Layer::on_backend("cpu_flash", c.params);
  LayerParams other_threads = c.params;
  other_threads.num_threads = c.params.num_threads + 1;
  const Layer t = Layer::on_backend("cpu_flash", other_threads);
  const Layer r = Layer::on_backend("reference", c.params);
  LayerParams windowed = c.params;
  windowed.config.sliding_window = 16;
  const Layer w = Layer::on_backend("cpu_flash", windowed);

  StepPlans plans(c.md);
  const KVCacheSpec& geometry = c.cache->spec();
  const StepPlan& pa = plans.for_layer(a, geometry);
  EXPECT_EQ(&plans.for_layer(b, geometry), &pa) << "equal layers planned twice";
  EXPECT_EQ(plans.size(), 1u);
  EXPECT_NE(&plans.for_layer(t, geometry), &pa) << "a plan shared across thread counts";
  EXPECT_NE(&plans.for_layer(w, geometry), &pa) << "a plan shared across configs";
  EXPECT_EQ(plans.size(), 3u);
  KVCacheSpec bigger = geometry;
  bigger.num_blocks += 1;
  EXPECT_NE(&plans.for_layer(a, bigger), &pa) << "a plan shared across cache geometries";
  EXPECT_EQ(plans.size(), 4u);
  // The reference reads another layout: its own plan, over its own cache geometry.
  const KVCacheSpec ref_geometry = r.cache_spec(geometry.num_blocks, geometry.block_size);
  EXPECT_EQ(plans.for_layer(r, ref_geometry).backend(), "reference");
  EXPECT_EQ(plans.size(), 5u);
  std::size_t largest = 0;
  for (const Layer* l : {&a, &t, &w}) largest = std::max(largest, plans.for_layer(*l, geometry).workspace_bytes());
  EXPECT_GE(plans.workspace_bytes(), largest);

  // A layer run under the shared plan computes the step as the reference does.
  Workspace ws(plans.workspace_bytes());
  for (int64_t i = 0; i < c.out.view().numel(); ++i) store_from_float(c.out.data(), c.out.dtype(), i, NAN);  // poison
  ForwardArgs args;
  args.q = c.q.view(), args.out = c.out.view(), args.cache = c.cache.get(), args.workspace = &ws;
  b.run(plans.for_layer(b, geometry), args);
  const CompareResult cmp = compare_output(c, reference_attention(c));
  EXPECT_TRUE(cmp.ok) << cmp.message << " " << spec.describe();
}

TEST(KeptScratch, OneCallRunsReuseTheThreadsScratchUnlessNestedDeviceOrHuge) {
  void* first = nullptr;
  {
    const KeptScratch outer(DeviceKind::cpu, 4096);
    ASSERT_NE(outer.get(), nullptr);
    outer.get()->reserve(4096);
    first = outer.get()->data();
    const KeptScratch nested(DeviceKind::cpu, 4096);
    EXPECT_EQ(nested.get(), nullptr) << "a nested one-call run shares the outer run's scratch";
  }
  {
    const KeptScratch again(DeviceKind::cpu, 1024);
    ASSERT_NE(again.get(), nullptr);
    EXPECT_EQ(again.get()->data(), first) << "the released scratch is not reused";
  }
  EXPECT_EQ(KeptScratch(DeviceKind::cuda, 4096).get(), nullptr) << "host scratch handed to a device run";
  EXPECT_EQ(KeptScratch(DeviceKind::cpu, std::size_t(65) << 20).get(), nullptr) << "a huge scratch kept";

  // forward() without a Workspace runs on it and computes the step as the reference does.
  CaseSpec spec;
  spec.config = llama_params().config;
  spec.seqs = {{300, 1}, {0, 40}};
  spec.seed = fresh_seed();
  Case c = make_case(spec, "cpu_flash");
  for (int rep = 0; rep < 2; ++rep) {
    for (int64_t i = 0; i < c.out.view().numel(); ++i) store_from_float(c.out.data(), c.out.dtype(), i, NAN);  // poison
    c.impl->forward(c.q.view(), *c.cache, c.md, c.out.view());
    const CompareResult cmp = compare_output(c, reference_attention(c));
    EXPECT_TRUE(cmp.ok) << "call " << rep << ": " << cmp.message << " " << spec.describe();
  }
}

}  // namespace
}  // namespace attn::test
