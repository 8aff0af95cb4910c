// Untrusted tuning files: each reproduced failure (stack overflow on deep nesting, /dev/zero read
// without bound, a FIFO or /dev/urandom hanging the reader, a directory, 1e30 cast to int) is now an
// attn::Error naming the file, the field, the value and what was expected.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <nlohmann/json.hpp>

#include "attn/attn.hpp"
#include "selector/selector_test_util.hpp"
#include "support/expect_error.hpp"

namespace {

using namespace attn;
using attn::test::error_message;
using attn::test::ScopedEnv;
using attn::test::throws_error;
using nlohmann::json;
namespace fs = std::filesystem;

/// A valid tuning file with one config and one choice, as the library writes it.
json valid() {
  TuningFile f;
  f.attn_version = "0.1.0", f.fingerprint = "fp", f.tuned_at = "2026-11-30T12:00:00Z", f.threads = 2;
  TunedChoice c;
  c.backend = "reference", c.block_size = 16, c.decode_us = 12.5, c.prefill_us = 300.25;
  f.configs.push_back({"key", R"({"head_size":64})", {c}});
  return json::parse(f.to_json());
}

/// valid()'s text with `value` spliced in raw as top-level field `field` (for values json cannot
/// hold, such as 1e400, or nesting it would overflow the stack printing).
std::string with_raw_field(const std::string& field, const std::string& value) {
  json j = valid();
  j.erase(field);
  const std::string text = j.dump();
  return text.substr(0, text.size() - 1) + ",\"" + field + "\":" + value + "}";
}

/// A fresh temporary folder, removed with everything in it.
struct TempDir {
  fs::path path = fs::temp_directory_path() / ("attn_tuning_bounds_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

TEST(TuningFileBounds, ValidFileParses) {
  const TuningFile f = TuningFile::parse(valid().dump());
  ASSERT_EQ(f.configs.size(), 1u);
  EXPECT_EQ(f.configs[0].choices[0].block_size, 16);
  EXPECT_EQ(f.threads, 2);
}

TEST(TuningFileBounds, DeepNestingIsAnErrorNotAStackOverflow) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  EXPECT_TRUE(throws_error([&] { TuningFile::parse(with_raw_field("configs", deep)); },
                           {"tuning file field 'configs'", "nests deeper than 16 levels"}));
  EXPECT_TRUE(throws_error([&] { TuningFile::parse(deep); }, {"tuning file nests deeper than 16 levels"}));
  // Unclosed, as a fuzzer or a truncated write leaves it.
  EXPECT_TRUE(throws_error([&] { TuningFile::parse(std::string(200000, '[')); }, {"nests deeper than 16 levels"}));
}

TEST(TuningFileBounds, FormatMustBeTheIntegerOne) {
  const std::pair<const char*, const char*> cases[] = {
      {"1e30", "'format'=1e+30 invalid: expected an integer in 0..2147483647"},
      {"-1e30", "'format'=-1e+30 invalid: expected an integer in 0..2147483647"},
      {"1.5", "'format'=1.5 invalid: expected an integer"},
      {"\"1\"", "'format'=\"1\" invalid: expected an integer"},
      {"2", "'format'=2 invalid: expected 1"},
      {"1e400", "'format'=1e400 invalid: out of range"},
  };
  for (const auto& c : cases) {
    const auto& value = c.first;  // a plain name: clang 14 lambdas cannot capture bindings
    SCOPED_TRACE(value);
    EXPECT_TRUE(throws_error([&] { TuningFile::parse(with_raw_field("format", value)); }, {"tuning file field", c.second}));
  }
  EXPECT_NO_THROW(TuningFile::parse(with_raw_field("format", "1.0")));
}

TEST(TuningFileBounds, ThreadsOutOfRangeAreErrors) {
  for (const char* value : {"-1", "1025", "1e30", "18446744073709551615"}) {
    SCOPED_TRACE(value);
    EXPECT_TRUE(throws_error([&] { TuningFile::parse(with_raw_field("threads", value)); },
                             {"field 'threads'=", "an integer in 0..1024"}));
  }
  EXPECT_TRUE(throws_error([&] { TuningFile::parse(with_raw_field("threads", "2.5")); }, {"'threads'=2.5", "an integer"}));
}

TEST(TuningFileBounds, EveryFieldIsTypedAndNamed) {
  const auto edited = [](const std::function<void(json&)>& edit) {
    json j = valid();
    edit(j);
    return j.dump();
  };
  const auto& choice = [](json& j) -> json& { return j["configs"][0]["choices"][0]; };
  struct Case {
    std::function<void(json&)> edit;
    const char* field;  // the message's "field=value" part
    const char* expected = "";
  };
  const Case cases[] = {
      {[&](json& j) { choice(j)["block_size"] = 1e30; }, "'configs[0].choices[0].block_size'=1e+30", "0..65536"},
      {[&](json& j) { choice(j)["block_size"] = -16; }, "'configs[0].choices[0].block_size'=-16", "0..65536"},
      {[&](json& j) { choice(j)["decode_us"] = -1; }, "'configs[0].choices[0].decode_us'=-1", "a number in"},
      {[&](json& j) { choice(j)["prefill_us"] = "fast"; }, "'configs[0].choices[0].prefill_us'=\"fast\"", "a number"},
      {[&](json& j) { choice(j)["backend"] = 7; }, "'configs[0].choices[0].backend'=7", "a string"},
      {[&](json& j) { choice(j)["error"] = json::array(); }, "'configs[0].choices[0].error'=a list of 0 entries", "a string"},
      {[&](json& j) { choice(j).erase("variant"); }, "'configs[0].choices[0].variant' is missing"},
      {[&](json& j) { j["configs"][0]["choices"] = 3; }, "'configs[0].choices'=3", "a list"},
      {[&](json& j) { j["configs"][0]["config"] = "head_size=64"; }, "'configs[0].config'=\"head_size=64\"", "an object"},
      {[&](json& j) { j["configs"][0]["key"] = 1; }, "'configs[0].key'=1", "a string"},
      {[&](json& j) { j["configs"] = json::object(); }, "'configs'=an object of 0 fields", "a list"},
      {[&](json& j) { j["configs"][0] = 5; }, "'configs[0]'=5", "an object"},
      {[&](json& j) { j["tuned_at"] = false; }, "'tuned_at'=false", "a string"},
      {[&](json& j) { j["platform"] = 1; }, "'platform'=1", "a string"},
      {[&](json& j) { j = json::array(); }, "tuning file top-level value=a list of 0 entries", "an object"},
  };
  for (const Case& c : cases) {
    const std::string text = edited(c.edit);
    SCOPED_TRACE(text);
    EXPECT_TRUE(throws_error([&] { TuningFile::parse(text); }, {c.field, c.expected}));
  }
}

TEST(TuningFileBounds, DevicesAreRefusedWithoutReading) {
  TempDir dir;
  const fs::path link = dir.path / "tuning.json";
  fs::create_symlink("/dev/zero", link);
  for (const std::string& path : {std::string("/dev/zero"), std::string("/dev/urandom"), link.string()}) {
    SCOPED_TRACE(path);
    EXPECT_TRUE(throws_error([&] { TuningFile::load(path); },
                             {"tuning file '" + path + "' is a character device: expected a regular file"}));
  }
}

TEST(TuningFileBounds, DirectoryIsRefused) {
  TempDir dir;
  EXPECT_TRUE(throws_error([&] { TuningFile::load(dir.path.string()); }, {dir.path.string(), "is a directory: expected a regular file"}));
}

TEST(TuningFileBounds, MissingFileNamesTheReason) {
  EXPECT_TRUE(throws_error([] { TuningFile::load("/nonexistent/attn/tuning.json"); },
                           {"tuning file '/nonexistent/attn/tuning.json' cannot be read", "No such file"}));
}

TEST(TuningFileBounds, FifoIsRefusedPromptly) {
  TempDir dir;
  const fs::path fifo = dir.path / "tuning.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto loading = std::async(std::launch::async, [&] { return error_message([&] { TuningFile::load(fifo.string()); }); });
  if (loading.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    // A reader blocked in open() or read(): a writer that opens and closes releases it.
    const int fd = ::open(fifo.c_str(), O_WRONLY);
    if (fd >= 0) ::close(fd);
    FAIL() << "reading a FIFO blocked";
  }
  EXPECT_NE(loading.get().find("is a FIFO: expected a regular file"), std::string::npos);
}

TEST(TuningFileBounds, OversizeFileIsRefusedBeforeReading) {
  TempDir dir;
  const fs::path big = dir.path / "tuning.json";
  {
    std::ofstream out(big, std::ios::binary);
    out << std::string((std::size_t(16) << 20) + 1, ' ');
  }
  EXPECT_TRUE(throws_error([&] { TuningFile::load(big.string()); }, {big.string(), "16777217 bytes", "at most 16777216 bytes"}));
}

TEST(TuningFileBounds, ActiveTuningIgnoresADeviceWithAWarning) {
  {
    ScopedEnv file("ATTN_TUNE_FILE", "/dev/zero");
    reload_tuning();
    EXPECT_EQ(active_tuning(), nullptr);
    EXPECT_NE(tuning_warning().find("is a character device"), std::string::npos) << tuning_warning();
  }
  reload_tuning();
}

}  // namespace
