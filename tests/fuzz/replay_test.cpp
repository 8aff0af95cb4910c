// Every saved fuzz input, replayed through its harness in the ordinary test suite: the seeds in
// corpus/<harness>/ and the inputs that once crashed, in regressions/<harness>/. The harness
// accepts attn::Error; any other exception fails the test here, and under the ASan build a
// memory error aborts it, as it did in the fuzzer.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

#include "fuzz/harnesses.hpp"

namespace attn::fuzz {
// Test names and failure messages show the harness by name.
void PrintTo(const Harness& h, std::ostream* os) { *os << h.name; }
}  // namespace attn::fuzz

namespace {

namespace fs = std::filesystem;

std::vector<fs::path> inputs(const std::string& folder, const std::string& harness) {
  std::vector<fs::path> out;
  const fs::path dir = fs::path(ATTN_SOURCE_DIR) / "tests" / "fuzz" / folder / harness;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file()) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

void replay(const attn::fuzz::Harness& h, const std::vector<fs::path>& files) {
  for (const auto& f : files) {
    SCOPED_TRACE(f.string());
    std::ifstream in(f, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    EXPECT_NO_THROW(h.run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  }
}

class FuzzReplay : public ::testing::TestWithParam<attn::fuzz::Harness> {};

TEST_P(FuzzReplay, SeedCorpusRunsClean) {
  const auto files = inputs("corpus", GetParam().name);
  ASSERT_FALSE(files.empty()) << "no seeds in tests/fuzz/corpus/" << GetParam().name;
  replay(GetParam(), files);
}

TEST_P(FuzzReplay, SavedCrashInputsRunClean) { replay(GetParam(), inputs("regressions", GetParam().name)); }


TEST_P(FuzzReplay, EmptyAndTinyInputsRunClean) {
  const uint8_t bytes[] = {0xff, 0x00, 0x7f, 0x80};
  for (std::size_t n = 0; n <= sizeof bytes; ++n) EXPECT_NO_THROW(GetParam().run(bytes, n));
}

INSTANTIATE_TEST_SUITE_P(Harnesses, FuzzReplay, ::testing::ValuesIn(attn::fuzz::kHarnesses),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
