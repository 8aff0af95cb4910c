// select_mamba: every type maps to its backend, forced overrides (argument > env), errors, cache.
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "attn/attn.hpp"
#include "attn/mamba.hpp"
#include "support/expect_error.hpp"
#include "support/mamba_reference.hpp"

namespace attn {
namespace {

using test::error_message;

// A custom mixer built on a built-in implementation: `name` serves `custom` with mamba1's kernels.
MixerDescriptor custom_on_mamba1(std::string name) {
  MixerDescriptor d;
  d.name = std::move(name);
  d.summary = "test";
  d.caps.types = {MambaType::custom};
  d.create = [](const MixerParams& p) {
    MixerParams q = p;
    q.config.type = MambaType::mamba1;
    return create_mixer("mamba1", q);
  };
  return d;
}

struct EnvGuard {
  EnvGuard() { unsetenv("ATTN_MAMBA_BACKEND"); }
  ~EnvGuard() { unsetenv("ATTN_MAMBA_BACKEND"); }
};

TEST(SelectMamba, EveryBuiltinTypeMapsToItsBackend) {
  EnvGuard env;
  const std::vector<std::pair<MambaType, std::string>> expected = {{MambaType::mamba1, "mamba1"},
                                                                   {MambaType::mamba2, "mamba2"},
                                                                   {MambaType::short_conv, "short_conv"},
                                                                   {MambaType::linear_attention, "linear"},
                                                                   {MambaType::gdn_attention, "gdn"}};
  for (const auto& [type, backend] : expected) {
    const Decision d = select_mamba(type);
    EXPECT_EQ(d.backend, backend);
    EXPECT_FALSE(d.variant.empty());
    EXPECT_EQ(d.forced_by, "");
    ASSERT_EQ(d.candidates.size(), mixer_backends().size());
    for (const Candidate& c : d.candidates) {
      EXPECT_EQ(c.valid, c.backend == backend) << c.backend;
      if (!c.valid) { EXPECT_EQ(c.reasons.at(0).field, "mamba_type"); }
    }
    EXPECT_NE(d.to_text().find(backend), std::string::npos);
    EXPECT_NE(d.to_json().find("\"" + backend + "\""), std::string::npos);
  }
}

TEST(SelectMamba, CpuMixersServeNoGpuTarget) {
  EnvGuard env;
  MambaSelectOptions opt;
  opt.platform = parse_platform("cuda:9.0");
  const Decision d = explain_mamba(MambaType::mamba1, opt);
  EXPECT_EQ(d.backend, "");
  ASSERT_EQ(d.candidates.size(), mixer_backends().size());
  for (const Candidate& c : d.candidates) {
    EXPECT_FALSE(c.valid) << c.backend;
    ASSERT_FALSE(c.reasons.empty()) << c.backend;
    EXPECT_EQ(c.reasons[0], (Reason{ReasonField::platform, "cuda", "cpu"})) << c.backend;
    EXPECT_EQ(c.reasons.size(), c.backend == "mamba1" ? 1u : 2u) << c.backend;  // others: mamba_type too
  }
  const std::string msg = error_message([&] { select_mamba(MambaType::mamba1, opt); });
  EXPECT_NE(msg.find("no mixer backend serves mamba_type=mamba1 on cuda"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mamba1: [platform=cuda, expected cpu]"), std::string::npos) << msg;
  // Forced onto the GPU target: an error naming the platform, never a silent CPU mixer.
  opt.backend = "mamba1";
  const std::string forced = error_message([&] { explain_mamba(MambaType::mamba1, opt); });
  EXPECT_NE(forced.find("platform=cuda, expected cpu"), std::string::npos) << forced;
  EXPECT_NE(forced.find("would: none"), std::string::npos) << forced;
}

TEST(SelectMamba, ARegistryOfItsOwn) {
  // A stand-in mixer added to a registry of the test's own: selectable from it, invisible to the
  // process-wide one.
  EnvGuard env;
  auto reg = MixerRegistry::with_builtins();
  MixerDescriptor d = custom_on_mamba1("stand_in_mixer");
  reg->add(d);
  MambaSelectOptions opt;
  opt.registry = reg.get();
  EXPECT_EQ(select_mamba(MambaType::custom, opt).backend, "stand_in_mixer");
  EXPECT_EQ(select_mamba(MambaType::mamba2, opt).candidates.size(), mixer_backends().size() + 1);
  EXPECT_EQ(find_mixer("stand_in_mixer"), nullptr);
  EXPECT_EQ(MixerRegistry::instance().find("stand_in_mixer"), nullptr);
  opt.backend = "stand_in_mixer";
  EXPECT_NE(error_message([&] { select_mamba(MambaType::custom, MambaSelectOptions{"stand_in_mixer", false, std::nullopt, nullptr}); })
                .find("Unknown mixer backend: 'stand_in_mixer'"),
            std::string::npos);
  EXPECT_EQ(select_mamba(MambaType::custom, opt).forced_by, "argument");
  MixerParams p = test::random_mixer_params(MixerConfig::from_dims(MambaType::mamba1, {{"d_inner", 4}, {"d_state", 2}, {"d_conv", 2}}), 1);
  p.config.type = MambaType::custom;
  EXPECT_EQ(reg->create("stand_in_mixer", p)->backend_name(), "stand_in_mixer");
}

TEST(SelectMamba, UnknownTypeNameListsValidTypes) {
  const std::string msg = error_message([] { parse_mamba_type("mamba3"); });
  for (MambaType t : all_mamba_types()) EXPECT_NE(msg.find(std::string(to_string(t))), std::string::npos) << msg;
}

TEST(SelectMamba, ForcedBackendArgumentBeatsEnv) {
  EnvGuard env;
  setenv("ATTN_MAMBA_BACKEND", "linear", 1);
  const Decision by_env = select_mamba(MambaType::linear_attention);
  EXPECT_EQ(by_env.backend, "linear");
  EXPECT_EQ(by_env.forced_by, "env ATTN_MAMBA_BACKEND");
  // The env names a backend that cannot serve mamba2: an error, never a silent fallback ...
  const std::string msg = error_message([] { select_mamba(MambaType::mamba2); });
  EXPECT_NE(msg.find("'linear'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mamba_type=mamba2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("would: mamba2"), std::string::npos) << msg;
  // ... unless the argument overrides it, or the env is ignored.
  MambaSelectOptions opt;
  opt.backend = "mamba2";
  const Decision by_arg = select_mamba(MambaType::mamba2, opt);
  EXPECT_EQ(by_arg.backend, "mamba2");
  EXPECT_EQ(by_arg.forced_by, "argument");
  MambaSelectOptions no_env;
  no_env.use_env = false;
  EXPECT_EQ(select_mamba(MambaType::mamba2, no_env).backend, "mamba2");
}

TEST(SelectMamba, BackendNamesIgnoreCase) {
  EnvGuard env;
  setenv("ATTN_MAMBA_BACKEND", "AUTO", 1);  // "auto" in any case forces nothing
  EXPECT_EQ(select_mamba(MambaType::mamba2).forced_by, "");
  MambaSelectOptions opt;
  opt.backend = "MAMBA2";  // vLLM spells backend names upper-case
  EXPECT_EQ(select_mamba(MambaType::mamba2, opt).backend, "mamba2");
}

TEST(SelectMamba, UnknownForcedBackendListsKnownOnes) {
  EnvGuard env;
  MambaSelectOptions opt;
  opt.backend = "mamba9";
  const std::string msg = error_message([&] { select_mamba(MambaType::mamba1, opt); });
  for (const char* name : {"mamba1", "mamba2", "short_conv", "linear", "gdn"})
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_NE(msg.find("mamba9"), std::string::npos) << msg;
}

TEST(SelectMamba, CustomNeedsARegisteredMixer) {
  EnvGuard env;
  clear_mamba_selector_cache();
  const std::string msg = error_message([] { select_mamba(MambaType::custom); });
  EXPECT_NE(msg.find("register_mixer"), std::string::npos) << msg;
  // A custom mixer built on a built-in implementation, registered at run time.
  MixerDescriptor d = custom_on_mamba1("my_custom_mixer");
  register_mixer(d);
  EXPECT_EQ(select_mamba(MambaType::custom).backend, "my_custom_mixer");
  EXPECT_NE(error_message([&] { register_mixer(d); }).find("my_custom_mixer"), std::string::npos);
}

TEST(SelectMamba, CachedAndThreadSafe) {
  EnvGuard env;
  clear_mamba_selector_cache();
  select_mamba(MambaType::gdn_attention);
  select_mamba(MambaType::gdn_attention);
  const auto stats = mamba_selector_cache_stats();
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.entries, 1u);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([] {
      for (int k = 0; k < 200; ++k)
        for (MambaType t : {MambaType::mamba1, MambaType::mamba2, MambaType::gdn_attention})
          EXPECT_FALSE(select_mamba(t).backend.empty());
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(mamba_selector_cache_stats().entries, 3u);
}

TEST(SelectMamba, CreateMixerRejectsUnknownAndMismatchedBackends) {
  const MixerConfig c = MixerConfig::from_dims(MambaType::mamba1, {{"d_inner", 4}, {"d_state", 2}, {"d_conv", 2}});
  MixerParams p;
  p.config = c;
  p.A.assign(8, -1.0f);
  p.conv_weight.assign(8, 0.5f);
  EXPECT_NE(error_message([&] { create_mixer("nope", p); }).find("known mixer backends"), std::string::npos);
  EXPECT_NE(error_message([&] { create_mixer("gdn", p); }).find("params.config.type=mamba1"), std::string::npos);
  EXPECT_EQ(create_mixer("mamba1", p)->variant().empty(), false);
}

// The tests below share the attention selector's machinery (select/selection.hpp): one memo,
// one forced-backend precedence, one unknown-backend error, ReasonField reasons.

TEST(SelectMambaCore, ForcedNamesAndAutoIgnoreCase) {
  EnvGuard env;
  MambaSelectOptions opt;
  opt.backend = "MAMBA2";
  const Decision upper = select_mamba(MambaType::mamba2, opt);
  EXPECT_EQ(upper.backend, "mamba2");  // the registered spelling
  EXPECT_EQ(upper.forced_by, "argument");
  opt.backend = "Auto";
  const Decision automatic = select_mamba(MambaType::mamba2, opt);
  EXPECT_EQ(automatic.backend, "mamba2");
  EXPECT_EQ(automatic.forced_by, "");
  setenv("ATTN_MAMBA_BACKEND", "Short_Conv", 1);
  const Decision by_env = select_mamba(MambaType::short_conv);
  EXPECT_EQ(by_env.backend, "short_conv");
  EXPECT_EQ(by_env.forced_by, "env ATTN_MAMBA_BACKEND");
}

TEST(SelectMambaCore, ArgumentThenEnvThenNone) {
  EnvGuard env;
  setenv("ATTN_MAMBA_BACKEND", "gdn", 1);
  MambaSelectOptions opt;
  opt.backend = "auto";  // forces nothing: the env decides
  EXPECT_EQ(select_mamba(MambaType::gdn_attention, opt).forced_by, "env ATTN_MAMBA_BACKEND");
  opt.backend = "gdn";
  EXPECT_EQ(select_mamba(MambaType::gdn_attention, opt).forced_by, "argument");
  opt.backend = "";
  opt.use_env = false;
  EXPECT_EQ(select_mamba(MambaType::gdn_attention, opt).forced_by, "");
  // The attention selector's env variable does not force a mixer.
  unsetenv("ATTN_MAMBA_BACKEND");
  setenv("ATTN_BACKEND", "mamba1", 1);
  const Decision d = select_mamba(MambaType::gdn_attention);
  unsetenv("ATTN_BACKEND");
  EXPECT_EQ(d.backend, "gdn");
  EXPECT_EQ(d.forced_by, "");
}

TEST(SelectMambaCore, MemoHitsAndCachedErrors) {
  EnvGuard env;
  clear_mamba_selector_cache();
  MambaSelectOptions opt;
  opt.backend = "MAMBA2";
  select_mamba(MambaType::mamba2, opt);
  select_mamba(MambaType::mamba2, opt);
  select_mamba(MambaType::mamba2);  // a different key: nothing forced
  auto stats = mamba_selector_cache_stats();
  EXPECT_EQ(stats.misses, 2u);
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.entries, 2u);
  // A planning target is part of the key, as in the attention selector.
  opt.platform = parse_platform("cpu:avx2");
  EXPECT_EQ(select_mamba(MambaType::mamba2, opt).platform, opt.platform->to_string());
  EXPECT_EQ(mamba_selector_cache_stats().entries, 3u);
  // Errors are remembered too, and thrown on every call.
  opt.backend = "mamba9";
  const std::string first = error_message([&] { select_mamba(MambaType::mamba2, opt); });
  EXPECT_EQ(error_message([&] { select_mamba(MambaType::mamba2, opt); }), first);
  stats = mamba_selector_cache_stats();
  EXPECT_EQ(stats.misses, 4u);
  EXPECT_EQ(stats.hits, 2u);
  clear_mamba_selector_cache();
  stats = mamba_selector_cache_stats();
  EXPECT_EQ(stats.hits + stats.misses + stats.entries, 0u);
}

TEST(SelectMambaCore, UnknownNameErrorMatchesTheAttentionSelectors) {
  EnvGuard env;
  setenv("ATTN_MAMBA_BACKEND", "mamba9", 1);
  const std::string msg = error_message([] { select_mamba(MambaType::mamba1); });
  EXPECT_EQ(msg.rfind("Unknown mixer backend: 'mamba9' (from env ATTN_MAMBA_BACKEND). Valid options are: "
                      "mamba1, mamba2, short_conv, linear, gdn",
                      0),
            0u)
      << msg;
  const std::string attention = error_message([] {
    SelectOptions o;
    o.backend = "mamba9";
    select(LayerConfig{}, o);
  });
  EXPECT_EQ(attention.rfind("Unknown attention backend: 'mamba9' (from argument). Valid options are: ", 0), 0u) << attention;
}

TEST(SelectMambaCore, ReasonsUseTheMambaTypeField) {
  EnvGuard env;
  const Decision d = select_mamba(MambaType::linear_attention);
  EXPECT_FALSE(d.config.has_value());  // a mixer decision carries no attention config
  EXPECT_EQ(d.to_text().find("\nlayer: "), std::string::npos) << d.to_text();
  EXPECT_NE(d.to_json().find("\"config\":null"), std::string::npos) << d.to_json();
  for (const Candidate& c : d.candidates)
    if (!c.valid) {
      EXPECT_EQ(c.reasons.at(0).field, ReasonField::mamba_type);
      EXPECT_EQ(c.reasons.at(0).value, "linear_attention");
    }
  EXPECT_EQ(ReasonFieldName("mamba_type").id(), ReasonField::mamba_type);
}

// After CustomNeedsARegisteredMixer (it needs `custom` unserved when it starts): registration is
// process-wide and cannot be undone.
TEST(SelectMambaCore, RegisteredMixerIsForcibleAndACandidate) {
  EnvGuard env;
  MixerDescriptor d = custom_on_mamba1("Synthetic_Mixer");
  d.variant = [](const Platform&) { return std::string("synthetic"); };
  register_mixer(d);
  MambaSelectOptions opt;
  opt.backend = "synthetic_mixer";  // any case
  const Decision forced = select_mamba(MambaType::custom, opt);
  EXPECT_EQ(forced.backend, "Synthetic_Mixer");
  EXPECT_EQ(forced.variant, "synthetic");
  EXPECT_EQ(forced.forced_by, "argument");
  // Every decision lists it: valid for `custom`, ruled out by mamba_type elsewhere.
  const Decision other = select_mamba(MambaType::mamba2);
  EXPECT_EQ(other.backend, "mamba2");
  bool listed = false;
  for (const Candidate& c : other.candidates)
    if (c.backend == "Synthetic_Mixer") {
      listed = true;
      EXPECT_FALSE(c.valid);
      ASSERT_EQ(c.reasons.size(), 1u);
      EXPECT_EQ(c.reasons[0].field, ReasonField::mamba_type);
      EXPECT_EQ(c.reasons[0].expected, "one of custom");
    }
  EXPECT_TRUE(listed);
  bool valid = false;
  for (const Candidate& c : forced.candidates) valid |= c.backend == "Synthetic_Mixer" && c.valid;
  EXPECT_TRUE(valid);
  // Forcing it on a type it does not serve names the backends that would.
  const std::string msg = error_message([&] { select_mamba(MambaType::mamba2, opt); });
  EXPECT_NE(msg.find("'synthetic_mixer'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("would: mamba2"), std::string::npos) << msg;
}

}  // namespace
}  // namespace attn
