// Descriptors a plugin may hand to Registry::add, and callbacks that misbehave: each ends in an
// attn::Error naming the backend and the field (or a Reason in the decision), never in a crash,
// a foreign exception or the wrong backend running. Stand-ins live in a registry of their own.
#include <gtest/gtest.h>

#include <stdexcept>

#include "attn/attn.hpp"
#include "selector/selector_test_util.hpp"
#include "support/expect_error.hpp"

namespace {

using namespace attn;
using attn::test::synthetic_caps;
using attn::test::synthetic_layer;
using attn::test::throws_error;

constexpr int kHead = test::kSyntheticHeadBase + 300;  // no other test's synthetic head size

// A stand-in that serves kHead by delegating to the reference backend of `reg`.
BackendDescriptor stand_in(Registry& reg, std::string name = "plugin_stand_in") {
  BackendDescriptor d;
  d.name = std::move(name);
  d.summary = "stand-in plugin backend";
  d.caps = synthetic_caps(kHead);
  d.priority = 1;
  d.create = [&reg](const LayerParams& p) { return reg.find("reference")->create(p); };
  return d;
}

SelectOptions from(Registry& reg) {
  SelectOptions o;
  o.use_env = false;
  o.registry = &reg;
  return o;
}

LayerParams params_for(const LayerConfig& c) {
  LayerParams p;
  p.config = c;
  return p;
}

// --- size rules: every field of both rules ---

TEST(PluginDescriptor, RangeWithStepZeroIsRefusedAtAdd) {
  auto reg = Registry::with_builtins();
  BackendDescriptor d = stand_in(*reg);
  d.caps.block_sizes = SizeRule::range(1, 4096, 0);
  EXPECT_TRUE(throws_error([&] { reg->add(d); }, {"backend 'plugin_stand_in': caps.block_sizes.step=0 invalid", "positive step"}));
  EXPECT_EQ(reg->find("plugin_stand_in"), nullptr);
  EXPECT_EQ(select(synthetic_layer(kHead), from(*reg)).backend, "reference") << "selection still works";
}

TEST(PluginDescriptor, MalformedSizeRulesAreRefusedNamingTheField) {
  struct Case {
    SizeRule rule;
    const char* fragment;
  };
  SizeRule bad_kind;
  bad_kind.kind = static_cast<SizeRule::Kind>(7);
  const Case cases[] = {
      {SizeRule::range(64, 32, 1), "caps.head_sizes.hi=32 invalid: expected >= lo=64"},
      {SizeRule::range(-8, 32, 8), "caps.head_sizes.lo=-8 invalid"},
      {SizeRule::range(0, 32, 1), "caps.head_sizes.lo=0 invalid"},
      {SizeRule::range(1, 32, -2), "caps.head_sizes.step=-2 invalid"},
      {SizeRule::one_of({}), "caps.head_sizes.values=[] invalid"},
      {SizeRule::one_of({kHead, -64}), "caps.head_sizes.values[1]=-64 invalid"},
      {SizeRule::multiple_of({}), "caps.head_sizes.values=[] invalid"},
      {SizeRule::multiple_of({0}), "caps.head_sizes.values[0]=0 invalid"},
      {SizeRule::any().plus({-1}), "caps.head_sizes.extra[0]=-1 invalid"},
      {bad_kind, "caps.head_sizes.kind=7 invalid"},
  };
  auto reg = Registry::with_builtins();
  for (const Case& c : cases) {
    BackendDescriptor d = stand_in(*reg);
    d.caps.head_sizes = c.rule;
    EXPECT_TRUE(throws_error([&] { reg->add(d); }, {"backend 'plugin_stand_in': ", c.fragment}));
  }
  BackendDescriptor d = stand_in(*reg);
  d.caps.block_sizes = SizeRule::one_of({});
  EXPECT_TRUE(throws_error([&] { reg->add(d); }, {"caps.block_sizes.values=[] invalid"}));
  EXPECT_EQ(reg->find("plugin_stand_in"), nullptr);
}

// --- factories ---

TEST(PluginDescriptor, NullFactoryIsRefusedUnlessAModuleProvidesIt) {
  auto reg = Registry::with_builtins();
  BackendDescriptor d = stand_in(*reg);
  d.create = nullptr;
  EXPECT_TRUE(throws_error([&] { reg->add(d); }, {"backend 'plugin_stand_in': create=null invalid: expected a factory"}));
  d.module = "attn_no_such_module";
  EXPECT_NO_THROW(reg->add(d));
  EXPECT_TRUE(throws_error([&] { reg->provide("plugin_stand_in", nullptr); }, {"provide(plugin_stand_in).create=null invalid"}));
}

TEST(PluginDescriptor, FactoryReturningNullIsAnErrorNamingTheBackend) {
  auto reg = Registry::with_builtins();
  BackendDescriptor d = stand_in(*reg);
  d.create = [](const LayerParams&) -> std::unique_ptr<AttentionImpl> { return nullptr; };
  reg->add(d);
  const LayerConfig c = synthetic_layer(kHead);
  EXPECT_EQ(select(c, from(*reg)).backend, "plugin_stand_in");
  EXPECT_TRUE(throws_error([&] { reg->create("plugin_stand_in", params_for(c)); },
                           {"backend 'plugin_stand_in': create() returned null"}));
}

TEST(PluginDescriptor, FactoryThrowingAForeignExceptionIsAnErrorNamingTheBackend) {
  auto reg = Registry::with_builtins();
  BackendDescriptor d = stand_in(*reg, "throws_std");
  d.create = [](const LayerParams&) -> std::unique_ptr<AttentionImpl> { throw std::runtime_error("no kernel today"); };
  reg->add(d);
  d = stand_in(*reg, "throws_int");
  d.create = [](const LayerParams&) -> std::unique_ptr<AttentionImpl> { throw 7; };
  reg->add(d);
  const LayerParams p = params_for(synthetic_layer(kHead));
  EXPECT_TRUE(throws_error([&] { reg->create("throws_std", p); }, {"backend 'throws_std': create() threw: no kernel today"}));
  EXPECT_TRUE(throws_error([&] { reg->create("throws_int", p); },
                           {"backend 'throws_int': create() threw: an exception that is not a std::exception"}));
}

// --- variant() and extra_checks ---

TEST(PluginDescriptor, VariantThrowingIsAnErrorNamingTheBackend) {
  auto reg = Registry::with_builtins();
  BackendDescriptor d = stand_in(*reg);
  d.variant = [](const Platform&, const LayerConfig&) -> std::string { throw std::runtime_error("cpuid failed"); };
  d.variants = [](const Platform&) -> std::vector<std::string> { throw 3; };
  reg->add(d);
  EXPECT_TRUE(throws_error([&] { select(synthetic_layer(kHead), from(*reg)); },
                           {"backend 'plugin_stand_in': variant() threw: cpuid failed"}));
  EXPECT_TRUE(throws_error([&] { reg->find("plugin_stand_in")->variants(detect_cpu()); },
                           {"backend 'plugin_stand_in': variants() threw: an exception that is not a std::exception"}));
}

TEST(PluginDescriptor, ExtraChecksThrowingMakesTheBackendInvalidWithAReason) {
  auto reg = Registry::with_builtins();
  BackendDescriptor d = stand_in(*reg, "checks_throw_std");
  d.extra_checks = [](const LayerConfig&, const Platform&) -> std::vector<Reason> { throw std::runtime_error("table missing"); };
  reg->add(d);
  d = stand_in(*reg, "checks_throw_int");
  d.priority = 2;
  d.extra_checks = [](const LayerConfig&, const Platform&) -> std::vector<Reason> { throw 1; };
  reg->add(d);
  const Decision dec = explain(synthetic_layer(kHead), from(*reg));
  EXPECT_EQ(dec.backend, "reference");
  for (const Candidate& c : dec.candidates) {
    if (c.backend != "checks_throw_std" && c.backend != "checks_throw_int") continue;
    EXPECT_FALSE(c.valid);
    ASSERT_EQ(c.reasons.size(), 1u) << c.backend;
    EXPECT_EQ(c.reasons[0].field, "extra_checks");
    EXPECT_EQ(c.reasons[0].value, c.backend == "checks_throw_std" ? "threw: table missing"
                                                                  : "threw: an exception that is not a std::exception");
  }
  SelectOptions forced = from(*reg);
  forced.backend = "checks_throw_std";
  EXPECT_TRUE(throws_error([&] { select(synthetic_layer(kHead), forced); },
                           {"Selected backend checks_throw_std", "extra_checks=threw: table missing"}));
}

// --- enums outside their type ---

TEST(PluginDescriptor, EveryEnumOutsideItsTypeIsRefused) {
  using Mutate = void (*)(BackendDescriptor&);
  struct Case {
    Mutate mutate;
    const char* fragment;
  };
  const Case cases[] = {
      {[](BackendDescriptor& d) { d.kv_layout = static_cast<KVLayout>(9); }, "kv_layout=9 invalid: expected a KVLayout value"},
      {[](BackendDescriptor& d) { d.device = static_cast<DeviceKind>(5); }, "device=5 invalid"},
      {[](BackendDescriptor& d) { d.caps.dtypes.push_back(static_cast<DType>(200)); }, "caps.dtypes[3]=200 invalid"},
      {[](BackendDescriptor& d) { d.caps.kv_cache_dtypes = {static_cast<KVCacheDType>(99)}; }, "caps.kv_cache_dtypes[0]=99 invalid"},
      {[](BackendDescriptor& d) { d.caps.attn_types = {static_cast<AttnType>(4)}; }, "caps.attn_types[0]=4 invalid"},
      {[](BackendDescriptor& d) { d.caps.platforms = {static_cast<PlatformKind>(2)}; }, "caps.platforms[0]=2 invalid"},
      {[](BackendDescriptor& d) { d.caps.required_cpu_features = {static_cast<CpuFeature>(77)}; },
       "caps.required_cpu_features[0]=77 invalid"},
      {[](BackendDescriptor& d) { d.kv_layout_rule = KVLayoutRule{{}, {}, static_cast<KVLayout>(4), {}}; },
       "kv_layout_rule.otherwise=4 invalid"},
      {[](BackendDescriptor& d) { d.kv_layout_rule = KVLayoutRule{{static_cast<DType>(8)}, {}, KVLayout::NHD, {}}; },
       "kv_layout_rule.q_dtypes[0]=8 invalid"},
      {[](BackendDescriptor& d) { d.kv_layout_rule = KVLayoutRule{{}, {}, KVLayout::NHD, {static_cast<CpuFeature>(77)}}; },
       "kv_layout_rule.cpu_features[0]=77 invalid"},
      {[](BackendDescriptor& d) { d.caps.min_cc = ComputeCapability{9, 0}, d.caps.max_cc = ComputeCapability{8, 0}; },
       "caps.max_cc=8.0 invalid: expected >= min_cc=9.0"},
  };
  auto reg = Registry::with_builtins();
  for (const Case& c : cases) {
    BackendDescriptor d = stand_in(*reg);
    c.mutate(d);
    EXPECT_TRUE(throws_error([&] { reg->add(d); }, {"backend 'plugin_stand_in': ", c.fragment}));
  }
  EXPECT_EQ(reg->find("plugin_stand_in"), nullptr);
}

// --- preferred block size ---

TEST(PluginDescriptor, PreferredBlockSizeMustBePositiveAndAllowedByItsOwnRule) {
  auto reg = Registry::with_builtins();
  for (int bad : {0, -16, 1 << 20}) {
    BackendDescriptor d = stand_in(*reg);
    d.preferred_block_size = bad;
    EXPECT_TRUE(throws_error([&] { reg->add(d); }, {"backend 'plugin_stand_in': preferred_block_size=" + std::to_string(bad) + " invalid"}));
  }
  BackendDescriptor d = stand_in(*reg);
  d.caps.block_sizes = SizeRule::multiple_of({16});
  d.preferred_block_size = 8;
  EXPECT_TRUE(throws_error([&] { reg->add(d); }, {"preferred_block_size=8 invalid: expected a size its own caps.block_sizes allows (a multiple of 16)"}));
  d.preferred_block_size = 32;
  reg->add(d);
  EXPECT_EQ(select(synthetic_layer(kHead), from(*reg)).block_size, 32);
}

// --- names ---

TEST(PluginDescriptor, NamesAreUniqueIgnoringCase) {
  auto reg = Registry::with_builtins();
  BackendDescriptor d = stand_in(*reg, "REFERENCE");
  d.caps = synthetic_caps(kHead);
  EXPECT_TRUE(throws_error([&] { reg->add(d); }, {"backend 'REFERENCE' is already registered (as 'reference'"}));
  SelectOptions o = from(*reg);
  o.backend = "REFERENCE";
  const Decision dec = select(synthetic_layer(kHead), o);
  EXPECT_EQ(dec.backend, "reference");
  EXPECT_EQ(reg->names().size(), Registry::with_builtins()->names().size());
}

TEST(PluginDescriptor, NamesMustBePrintableBoundedAndNotAuto) {
  auto reg = Registry::with_builtins();
  for (const std::string& bad : {std::string(), std::string("two words"), std::string("tab\there"), std::string(65, 'x'),
                                std::string("Auto"), std::string("a/b"), std::string("nul\0x", 5)}) {
    BackendDescriptor d = stand_in(*reg, bad);
    EXPECT_TRUE(throws_error([&] { reg->add(d); }, {"backend.name=", "invalid: expected 1..64 printable ASCII characters"})) << bad;
  }
  BackendDescriptor d = stand_in(*reg);
  d.module = "lib/evil";
  EXPECT_TRUE(throws_error([&] { reg->add(d); }, {"backend 'plugin_stand_in': module='lib/evil' invalid"}));
  d = stand_in(*reg);
  d.summary = "bad \xff utf-8";
  EXPECT_TRUE(throws_error([&] { reg->add(d); }, {"backend 'plugin_stand_in': summary="}));
}

// --- staged registration ---

TEST(PluginDescriptor, PluginThatProvidesThenThrowsLeavesTheRegistryAsItWas) {
  auto reg = Registry::with_builtins();
  const uint64_t generation = reg->generation();
  const std::string path = ATTN_TEST_PLUGIN_PROVIDE_THROWS_PATH;
  EXPECT_TRUE(throws_error([&] { reg->load_plugin(path); },
                           {"plugin '" + path + "' not loaded: attn_register threw: fixture failure after provide"}));
  EXPECT_EQ(reg->generation(), generation) << "nothing was committed, so cached decisions stay right";
  EXPECT_EQ(reg->find("test_plugin_provides_then_throws"), nullptr);
  LayerConfig c = synthetic_layer(kHead);
  auto impl = reg->create("reference", params_for(c));  // the built-in factory, not the plugin's
  ASSERT_NE(impl, nullptr);
  EXPECT_EQ(impl->backend_name(), "reference");
}

TEST(PluginDescriptor, PluginWhoseAddIsRefusedLeavesNothingBehind) {
  // Loaded twice: the second attn_register's add() of a taken name fails inside attn_register.
  auto reg = Registry::with_builtins();
  reg->load_plugin(ATTN_TEST_PLUGIN_PATH);
  const uint64_t generation = reg->generation();
  EXPECT_TRUE(throws_error([&] { reg->load_plugin(ATTN_TEST_PLUGIN_PATH); },
                           {"attn_register threw: backend 'test_plugin' is already registered"}));
  EXPECT_EQ(reg->generation(), generation);
}

}  // namespace

#include "plugin/plugin_text.hpp"

namespace {

TEST(PluginText, OnlyWellFormedUtf8IsPlainText) {
  using attn::detail::is_plain_text;
  using attn::detail::plain_text;
  EXPECT_TRUE(is_plain_text("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  // Overlong forms, a surrogate and a code point past U+10FFFF: JSON output refuses each.
  for (const char* bad : {"a\xc0\x80", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80"}) {
    EXPECT_FALSE(is_plain_text(bad)) << bad;
    EXPECT_TRUE(is_plain_text(plain_text(bad))) << bad;
  }
}

}  // namespace
