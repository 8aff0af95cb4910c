// attn's limits (limits.hpp) and checked arithmetic (checked.hpp): overflow and out-of-range
// values are attn::Errors naming the argument, the value and the limit; the memory budget reads
// its override from the caller, then ATTN_MEMORY_LIMIT, then the machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "attn/backend.hpp"
#include "attn/checked.hpp"
#include "attn/layer_config.hpp"
#include "attn/limits.hpp"
#include "attn/registry.hpp"
#include "support/expect_error.hpp"

namespace {

using namespace attn;
using attn::test::throws_error;

/// Sets an environment variable for one test and restores the old value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) ::setenv(name_, old_.c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// --- checked arithmetic ---

TEST(Checked, ProductWithinLimitIsExact) {
  EXPECT_EQ(checked_product("n", {3, 5, 7}), 105);
  EXPECT_EQ(checked_product("n", std::vector<int64_t>{}), 1);
  EXPECT_EQ(checked_sum("n", {1, 2, 3}, 6), 6);
}

TEST(Checked, ProductBeyond64BitsNamesEveryFactor) {
  EXPECT_TRUE(throws_error([] { checked_product("cache bytes", {1 << 30, 1 << 28, 1 << 20}); },
                           {"cache bytes=1073741824 * 268435456 * 1048576 (beyond 64 bits)", "at most 9223372036854775807"}));
}

TEST(Checked, ProductBeyondTheLimitShowsTheValueAndWhy) {
  EXPECT_TRUE(throws_error([] { checked_product("blocks", {4, 100}, 256, "blocks of one cache"); },
                           {"blocks=4 * 100 = 400", "at most 256 (blocks of one cache)"}));
}

TEST(Checked, SumOverflowIsNotNegative) {
  const int64_t big = int64_t(1) << 62;
  EXPECT_TRUE(throws_error([&] { checked_sum("len", {big, big}); }, {"len=4611686018427387904 + 4611686018427387904 (beyond 64 bits)"}));
}

TEST(Checked, NegativeOperandIsNamed) {
  EXPECT_TRUE(throws_error([] { checked_product("n", {4, -2}); }, {"n=4 * -2", "non-negative operands"}));
}

TEST(Checked, RangeNamesBothBounds) {
  EXPECT_EQ(check_range("x", 5, 1, 10), 5);
  EXPECT_TRUE(throws_error([] { check_range("x", 0, 1, 10, "why"); }, {"x=0 invalid: expected > 0 and <= 10 (why)"}));
  EXPECT_TRUE(throws_error([] { check_range("x", 11, 0, 10); }, {"x=11 invalid: expected >= 0 and <= 10"}));
}

// --- named limits ---

TEST(Limits, MaxHeadSizeCoversEveryBackendRule) {
  // The limit must never reject a size a registered backend declares it serves.
  for (const auto& b : Registry::instance().backends()) {
    const SizeRule& r = b->caps.head_sizes;
    int largest = r.extra.empty() ? 0 : *std::max_element(r.extra.begin(), r.extra.end());
    if (r.kind == SizeRule::Kind::range) largest = std::max(largest, r.hi);
    if (r.kind == SizeRule::Kind::one_of && !r.values.empty())
      largest = std::max(largest, *std::max_element(r.values.begin(), r.values.end()));
    EXPECT_LE(largest, limits::kMaxHeadSize) << b->name << ": " << r.describe();
  }
  EXPECT_GE(limits::kMaxHeadSize, 512 + 64);  // MLA's latent entry
}

TEST(Limits, ThreadsBeyondTheLimitAreRefusedByLayerParams) {
  LayerParams p;
  p.num_threads = 100000;
  EXPECT_TRUE(throws_error([&] { p.validate(); }, {"num_threads=100000", "<= 1024"}));
  p.num_threads = limits::kMaxThreads;
  EXPECT_NO_THROW(p.validate());
}

TEST(Limits, HeadSizeWithoutUpperBoundIsRefused) {
  LayerConfig c;
  c.head_size = 100000;
  EXPECT_TRUE(throws_error([&] { c.validate(); }, {"head_size=100000", "<= 2048"}));
  c = LayerConfig{};
  c.num_heads = c.num_kv_heads = 1 << 20;
  EXPECT_TRUE(throws_error([&] { c.validate(); }, {"num_heads=1048576", "<= 4096"}));
  c = LayerConfig{};
  c.block_size = 1 << 20;
  EXPECT_TRUE(throws_error([&] { c.validate(); }, {"block_size=1048576", "<= 65536"}));
}

TEST(Limits, MlaDimsAreNamedBeforeTheirWrappedSum) {
  // What a config reader produces from kv_lora_rank = qk_rope_head_dim = 2^30 in int arithmetic.
  LayerConfig c;
  c.use_mla = true;
  c.num_kv_heads = 1;
  c.kv_lora_rank = 1 << 30;
  c.qk_rope_head_dim = 1 << 30;
  c.head_size = std::numeric_limits<int>::min();
  const std::string msg = attn::test::error_message([&] { c.validate(); });
  EXPECT_NE(msg.find("kv_lora_rank=1073741824"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("-2147483648"), std::string::npos) << msg;
  c.kv_lora_rank = 512;
  EXPECT_TRUE(throws_error([&] { c.validate(); }, {"qk_rope_head_dim=1073741824", "<= 2048"}));
}

// --- memory budget ---

TEST(MemoryBudget, ParsesSizesInPowersOf1024) {
  EXPECT_EQ(parse_byte_size("m", "4096"), 4096u);
  EXPECT_EQ(parse_byte_size("m", "64K"), 64u << 10);
  EXPECT_EQ(parse_byte_size("m", "512M"), 512u << 20);
  EXPECT_EQ(parse_byte_size("m", "8G"), uint64_t(8) << 30);
  EXPECT_EQ(parse_byte_size("m", "1.5G"), uint64_t(3) << 29);
  EXPECT_EQ(parse_byte_size("m", "2GiB"), uint64_t(2) << 30);
  EXPECT_EQ(parse_byte_size("m", "2gb"), uint64_t(2) << 30);
  EXPECT_EQ(parse_byte_size("m", "1T"), uint64_t(1) << 40);
}

TEST(MemoryBudget, RejectsWhatIsNotASize) {
  for (const char* bad : {"", "0", "-1G", "8X", "G", "8 G", "1e30T", "nan", "0.1"})
    EXPECT_TRUE(throws_error([&] { parse_byte_size("--memory-limit", bad); },
                             {std::string("--memory-limit='") + bad + "'", "8G, 512M"}));
}

TEST(MemoryBudget, OverrideThenEnvironmentThenMachine) {
  ScopedEnv env(limits::kMemoryLimitEnv, "3G");
  MemoryBudget b = memory_budget("--memory-limit", "512M");
  EXPECT_EQ(b.bytes, 512u << 20);
  EXPECT_EQ(b.source, "--memory-limit=512M");
  b = memory_budget("--memory-limit", "");
  EXPECT_EQ(b.bytes, uint64_t(3) << 30);
  EXPECT_EQ(b.source, "ATTN_MEMORY_LIMIT=3G");
  ScopedEnv unset(limits::kMemoryLimitEnv, nullptr);
  b = memory_budget();
  EXPECT_GT(b.bytes, 0u);
  EXPECT_NE(b.source.find("80% of"), std::string::npos) << b.source;
}

TEST(MemoryBudget, BadEnvironmentValueIsNamed) {
  ScopedEnv env(limits::kMemoryLimitEnv, "plenty");
  EXPECT_TRUE(throws_error([] { memory_budget(); }, {"ATTN_MEMORY_LIMIT='plenty'"}));
}

TEST(MemoryBudget, ExceedingItNamesWhatTheBudgetAndTheHint) {
  const MemoryBudget b{uint64_t(1) << 30, "--memory-limit=1G"};
  EXPECT_NO_THROW(check_memory("caches", uint64_t(1) << 30, b, "hint"));
  EXPECT_TRUE(throws_error([&] { check_memory("caches", uint64_t(3) << 29, b, "lower --batch"); },
                           {"caches=1.5 GiB", "at most 1.0 GiB", "--memory-limit=1G", "lower --batch"}));
}

TEST(MemoryBudget, FormatsBytes) {
  EXPECT_EQ(format_bytes(100), "100 bytes");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(uint64_t(512) << 20), "512.0 MiB");
}

}  // namespace
