// select_mamba: every type maps to its backend, forced overrides (argument > env), errors, cache.
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "attn/attn.hpp"
#include "attn/mamba.hpp"

namespace attn {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
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

TEST(SelectMamba, UnknownTypeNameListsValidTypes) {
  const std::string msg = error_of([] { parse_mamba_type("mamba3"); });
  for (MambaType t : all_mamba_types()) EXPECT_NE(msg.find(std::string(to_string(t))), std::string::npos) << msg;
}

TEST(SelectMamba, ForcedBackendArgumentBeatsEnv) {
  EnvGuard env;
  setenv("ATTN_MAMBA_BACKEND", "linear", 1);
  const Decision by_env = select_mamba(MambaType::linear_attention);
  EXPECT_EQ(by_env.backend, "linear");
  EXPECT_EQ(by_env.forced_by, "env ATTN_MAMBA_BACKEND");
  // The env names a backend that cannot serve mamba2: an error, never a silent fallback ...
  const std::string msg = error_of([] { select_mamba(MambaType::mamba2); });
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
  const std::string msg = error_of([&] { select_mamba(MambaType::mamba1, opt); });
  for (const char* name : {"mamba1", "mamba2", "short_conv", "linear", "gdn"})
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_NE(msg.find("mamba9"), std::string::npos) << msg;
}

TEST(SelectMamba, CustomNeedsARegisteredMixer) {
  EnvGuard env;
  clear_mamba_selector_cache();
  const std::string msg = error_of([] { select_mamba(MambaType::custom); });
  EXPECT_NE(msg.find("register_mixer"), std::string::npos) << msg;
  // A custom mixer built on a built-in implementation, registered at run time.
  MixerDescriptor d;
  d.name = "my_custom_mixer";
  d.summary = "test";
  d.types = {MambaType::custom};
  d.create = [](const MixerParams& p) {
    MixerParams q = p;
    q.config.type = MambaType::mamba1;
    return create_mixer("mamba1", q);
  };
  register_mixer(d);
  EXPECT_EQ(select_mamba(MambaType::custom).backend, "my_custom_mixer");
  EXPECT_NE(error_of([&] { register_mixer(d); }).find("my_custom_mixer"), std::string::npos);
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
  EXPECT_NE(error_of([&] { create_mixer("nope", p); }).find("known mixer backends"), std::string::npos);
  EXPECT_NE(error_of([&] { create_mixer("gdn", p); }).find("params.config.type=mamba1"), std::string::npos);
  EXPECT_EQ(create_mixer("mamba1", p)->variant().empty(), false);
}

}  // namespace
}  // namespace attn
