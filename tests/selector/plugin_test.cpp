// Out-of-tree backends: the fixture library (tests/plugin_fixture, built as its own shared
// library) registers through load_plugin or ATTN_PLUGINS, is selected for the one layer it
// serves and runs; libraries that cannot load give an attn::Error with the reason.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "attn/attn.hpp"
#include "selector/selector_test_util.hpp"
#include "support/expect_error.hpp"
#include "support/test_support.hpp"

namespace {

using namespace attn;
using attn::test::throws_error;
namespace fs = std::filesystem;

// Loads the fixture once per process (a second load would register the name twice).
void ensure_test_plugin() {
  if (!Registry::instance().find("test_plugin")) load_plugin(ATTN_TEST_PLUGIN_PATH);
}

LayerConfig head80() {
  LayerConfig c;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_size = 80;
  c.dtype = DType::float32;
  return c;
}

std::string libattn_path() {
  Dl_info info;
  if (!dladdr(reinterpret_cast<void*>(&detect_cpu), &info) || !info.dli_fname) return {};
  return info.dli_fname;
}

TEST(Plugin, LoadedPluginIsSelectedForItsLayer) {
  ensure_test_plugin();
  SelectOptions o;
  o.use_env = false;
  const Decision d = select(head80(), o);
  EXPECT_EQ(d.backend, "test_plugin");
  LayerConfig other = head80();
  other.dtype = DType::bfloat16;
  EXPECT_NE(select(other, o).backend, "test_plugin") << "it declares float32 only";
}

TEST(Plugin, PluginBackendRunsAgainstTheFp64Reference) {
  ensure_test_plugin();
  test::CaseSpec spec;
  spec.config = head80();
  spec.seqs = {{5, 3}, {0, 6}, {17, 1}};
  spec.block_size = 8;
  spec.seed = test::fresh_seed();
  const auto r = test::check_backend(spec, "test_plugin");
  EXPECT_TRUE(r.ok) << r.message << "\n" << spec.describe();
}

TEST(Plugin, LoadingTwiceIsAnError) {
  ensure_test_plugin();
  EXPECT_TRUE(throws_error([] { load_plugin(ATTN_TEST_PLUGIN_PATH); }, {"backend 'test_plugin' is already registered"}));
}

TEST(Plugin, NonExistentPath) {
  const std::string path = "/nonexistent/libattn_missing_plugin.so";
  EXPECT_TRUE(throws_error([&] { load_plugin(path); }, {"plugin '" + path + "' not loaded: ", "No such file"}));
}

TEST(Plugin, LibraryWithoutEntryPoints) {
  const std::string lib = libattn_path();  // a real shared library that exports no attn_register
  ASSERT_FALSE(lib.empty());
  EXPECT_TRUE(throws_error([&] { load_plugin(lib); }, {"plugin '" + lib + "' not loaded: ", "does not export attn_abi_version / attn_register"}));
}

TEST(Plugin, FileThatIsNotALibrary) {
  const fs::path p = fs::temp_directory_path() / ("attn_not_a_plugin_" + std::to_string(::getpid()) + ".so");
  { std::FILE* f = std::fopen(p.c_str(), "w"); std::fputs("not an ELF file\n", f); std::fclose(f); }
  EXPECT_TRUE(throws_error([&] { load_plugin(p.string()); }, {"plugin '" + p.string() + "' not loaded: "}));
  fs::remove(p);
}

// --- misbehaving plugins: a reason for that plugin, never a broken program ---

TEST(Plugin, ThrowingAttnRegisterIsAnErrorAndLeavesNoBackend) {
  const std::string path = ATTN_TEST_PLUGIN_THROWS_PATH;
  EXPECT_TRUE(throws_error([&] { load_plugin(path); },
                           {"plugin '" + path + "' not loaded: attn_register threw: fixture failure in attn_register"}));
  EXPECT_EQ(Registry::instance().find("test_plugin_throws"), nullptr) << "what it added before throwing is rolled back";
  // The registry still works, and a second try fails the same way instead of "already registered".
  EXPECT_NE(Registry::instance().find("reference"), nullptr);
  EXPECT_TRUE(throws_error([&] { load_plugin(path); }, {"attn_register threw: fixture failure"}));
}

TEST(Plugin, AttnRegisterThrowingANonStdExceptionIsAnError) {
  const std::string path = ATTN_TEST_PLUGIN_THROWS_INT_PATH;
  EXPECT_TRUE(throws_error([&] { load_plugin(path); },
                           {"plugin '" + path + "' not loaded: attn_register threw: an exception that is not a std::exception"}));
  EXPECT_EQ(Registry::instance().find("test_plugin_throws_int"), nullptr);
}

TEST(Plugin, AttnRegisterMayCallRegistryInstance) {
  if (!Registry::instance().find("test_plugin_reentrant")) load_plugin(ATTN_TEST_PLUGIN_REENTRANT_PATH);
  LayerConfig c = head80();
  c.head_size = 72;
  SelectOptions o;
  o.use_env = false;
  EXPECT_EQ(select(c, o).backend, "test_plugin_reentrant");
}

// --- ATTN_PLUGINS, end to end through the CLI in a child process ---

struct ChildResult {
  int rc = -1;
  std::string out;
};

ChildResult run_child(const std::string& cmd) {
  ChildResult r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  const int status = ::pclose(pipe);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string cli() { return fs::exists(ATTN_CLI_PATH) ? ATTN_CLI_PATH : ""; }

const nlohmann::json* find_backend(const nlohmann::json& j, const std::string& name) {
  for (auto& b : j["backends"]) if (b["name"] == name) return &b;
  return nullptr;
}

TEST(Plugin, AttnPluginsEnvRegistersInAFreshProcess) {
  if (cli().empty()) GTEST_SKIP() << "attn CLI not built at " << ATTN_CLI_PATH;
  const ChildResult r = run_child("ATTN_LOG=error ATTN_PLUGINS='" + std::string(ATTN_TEST_PLUGIN_PATH) + "' '" + cli() + "' backends --json 2>/dev/null");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  const auto* b = find_backend(j, "test_plugin");
  ASSERT_NE(b, nullptr) << r.out;
  EXPECT_EQ((*b)["loadable"], true);
  EXPECT_EQ((*b)["priority"], 5);
  EXPECT_FALSE(j.contains("plugin_errors"));
}

TEST(Plugin, AttnPluginsEnvWithABadEntryIsReportedNotFatal) {
  if (cli().empty()) GTEST_SKIP() << "attn CLI not built at " << ATTN_CLI_PATH;
  const ChildResult r = run_child("ATTN_LOG=error ATTN_PLUGINS='/nonexistent/libnope.so:" + std::string(ATTN_TEST_PLUGIN_PATH) + "' '" + cli() +
                    "' backends --json 2>/dev/null");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_NE(find_backend(j, "test_plugin"), nullptr) << "the good entry after the bad one still loads";
  ASSERT_TRUE(j.contains("plugin_errors"));
  ASSERT_EQ(j["plugin_errors"].size(), 1u);
  EXPECT_NE(j["plugin_errors"][0].get<std::string>().find("plugin '/nonexistent/libnope.so' not loaded"), std::string::npos);
}

TEST(Plugin, AttnPluginsEnvWithReentrantAndThrowingPluginsKeepsEveryCommandWorking) {
  if (cli().empty()) GTEST_SKIP() << "attn CLI not built at " << ATTN_CLI_PATH;
  // The re-entrant plugin calls Registry::instance() while instance() is loading ATTN_PLUGINS:
  // before, that re-entered a static initializer (abort); a throwing plugin broke every command.
  const std::string plugins = std::string(ATTN_TEST_PLUGIN_THROWS_PATH) + ":" + ATTN_TEST_PLUGIN_REENTRANT_PATH + ":" +
                              ATTN_TEST_PLUGIN_THROWS_INT_PATH + ":" + ATTN_TEST_PLUGIN_PATH;
  const std::string env = "ATTN_LOG=error ATTN_PLUGINS='" + plugins + "' ";
  const ChildResult r = run_child(env + "'" + cli() + "' backends --json 2>/dev/null");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_NE(find_backend(j, "test_plugin_reentrant"), nullptr) << r.out;
  EXPECT_NE(find_backend(j, "test_plugin"), nullptr) << "plugins after a throwing one still load";
  EXPECT_EQ(find_backend(j, "test_plugin_throws"), nullptr);
  EXPECT_EQ(find_backend(j, "test_plugin_throws_int"), nullptr);
  ASSERT_TRUE(j.contains("plugin_errors"));
  ASSERT_EQ(j["plugin_errors"].size(), 2u) << r.out;
  for (const auto& e : j["plugin_errors"])
    EXPECT_NE(e.get<std::string>().find("not loaded: attn_register threw: "), std::string::npos) << e;
  const ChildResult plan = run_child(env + "'" + cli() + "' plan --model llama-3.1-8b 2>&1");
  EXPECT_EQ(plan.rc, 0) << plan.out;
}

TEST(Plugin, WithoutAttnPluginsTheFixtureIsAbsent) {
  if (cli().empty()) GTEST_SKIP() << "attn CLI not built at " << ATTN_CLI_PATH;
  const ChildResult r = run_child("env -u ATTN_PLUGINS ATTN_LOG=error '" + cli() + "' backends --json 2>/dev/null");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(find_backend(nlohmann::json::parse(r.out), "test_plugin"), nullptr);
}

}  // namespace
