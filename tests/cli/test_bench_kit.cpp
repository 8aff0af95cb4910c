// The bench kit behind `attn bench`: the pool rule, the rotation of instances, the ceilings'
// statistics and the CPU's name.
#include <gtest/gtest.h>

#include "testkit/bench_kit.hpp"
#include "testkit/bench_simd.hpp"

namespace {

using attn_bench::Shape;
constexpr std::size_t kMiB = std::size_t(1) << 20;

TEST(BenchKit, DecodeItemsFollowThePlanSplit) {
  Shape s;  // 4097 keys: splits at 0, 1024, 2048, 3072 and 4096 per (sequence, kv head)
  s.batch = 3;
  attn_bench::Workload w(s, "cpu_flash", 1, 0);
  const auto items = w.paged_rows(0);
  EXPECT_EQ(items.size(), std::size_t(3 * 8 * 5));
  EXPECT_EQ(items.front().end - items.front().begin, 1024);
  EXPECT_EQ(items.back().end - items.back().begin, 1);  // largest first
}

TEST(BenchKit, DecodeItemsCoverExactlyTheKvBytesOfACall) {
  Shape llama, fp8_h64, bf16_h80, window;
  llama.batch = 2, llama.context = 3000;
  fp8_h64.kv = attn::KVCacheDType::fp8_e4m3, fp8_h64.head_size = 64;
  bf16_h80.head_size = 80;
  window.heads = 64, window.head_size = 64, window.window = 128, window.batch = 3;
  for (const Shape& s : {llama, fp8_h64, bf16_h80, window}) {
    SCOPED_TRACE(std::to_string(s.head_size) + (s.window ? " window" : ""));
    attn_bench::Workload w(s, "cpu_flash", 1, 4 * kMiB);
    double bytes = 0;
    for (const attn_bench::PagedRows& r : w.paged_rows(0)) bytes += double(r.end - r.begin) * (r.k_bytes + r.v_bytes);
    EXPECT_EQ(bytes, w.kv_bytes());
  }
}

TEST(BenchKit, InstancesRotateOverThePool) {
  Shape s;
  s.context = 1024;
  const std::size_t pool = 64 * kMiB;
  attn_bench::Workload w(s, "cpu_flash", 1, pool);
  EXPECT_GE(w.instances(), 2);
  EXPECT_GE(w.instances() * w.kv_bytes(), 0.95 * double(pool));
  s.batch = 2, s.context = 2048;  // one call (16 MiB) already reads more than the pool
  EXPECT_EQ(attn_bench::Workload(s, "cpu_flash", 1, 8 * kMiB).instances(), 2);
  EXPECT_EQ(attn_bench::Workload(s, "reference", 1, 0).instances(), 1);
}

TEST(BenchKit, PoolIsFourLastLevelCachesOrLabelledCache) {
  static_assert(attn_bench::dram_pool_min(32 * kMiB) == 128 * kMiB);
  const attn_bench::LastLevelCache& llc = attn_bench::last_level_cache();
  const attn_bench::Pool full = attn_bench::choose_pool(false), quick = attn_bench::choose_pool(true);
  if (llc.bytes) {
    EXPECT_GE(full.bytes, attn_bench::dram_pool_min(llc.bytes));
    EXPECT_TRUE(full.dram);
  } else {
    EXPECT_FALSE(full.dram);  // unknown LLC: never claimed as DRAM figures
  }
  EXPECT_LE(quick.bytes, 64 * kMiB);
  EXPECT_EQ(quick.dram, llc.bytes && quick.bytes >= attn_bench::dram_pool_min(llc.bytes));
  EXPECT_STREQ(quick.label(), quick.dram ? "dram" : "cache");
}

TEST(BenchKit, CeilingsNameTheirInstruction) {
  const attn_bench::Ceiling read = attn_bench::read_bandwidth(1, 8 * kMiB, 1);
  EXPECT_GT(read.value, 0.0);
  EXPECT_FALSE(read.instruction.empty());
  const attn_bench::Ceiling fma = attn_bench::fp32_fma(1, 1);
  EXPECT_EQ(fma.value > 0, attn_bench::simd().fma != nullptr) << fma.instruction;
  EXPECT_FALSE(attn_bench::amx_bf16(1, 1).instruction.empty());
}

TEST(BenchKit, CeilingsKeepEveryRunAndReportMedianAndP90) {
  EXPECT_DOUBLE_EQ(attn_bench::quantile({}, 0.5), 0.0);
  EXPECT_DOUBLE_EQ(attn_bench::quantile({3, 1, 2}, 0.5), 2.0);
  EXPECT_DOUBLE_EQ(attn_bench::quantile({4, 1, 3, 2}, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(attn_bench::quantile({0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100}, 0.9), 90.0);
  attn_bench::Ceiling c;
  c.add({10, 50, 30});
  EXPECT_DOUBLE_EQ(c.value, 30.0);
  c.add({20, 40});  // samples beside a kernel run join the run's statistics
  EXPECT_EQ(c.samples.size(), 5u);
  EXPECT_DOUBLE_EQ(c.value, 30.0);
  EXPECT_DOUBLE_EQ(c.p90, 46.0);
  const attn_bench::Ceiling read = attn_bench::read_bandwidth(1, 8 * kMiB, 3);
  EXPECT_EQ(read.samples.size(), 3u);  // the warm-up pass is not a sample
  EXPECT_GE(read.p90, read.value);
}

TEST(BenchKit, ReadStreamSamplesTheSameBufferAgain) {
  attn_bench::ReadStream stream(2, 8 * kMiB);
  EXPECT_EQ(stream.threads(), 2);
  EXPECT_GT(stream.once(), 0.0);
  EXPECT_GT(stream.once(), 0.0);
  EXPECT_STREQ(stream.instruction(), attn_bench::simd().read_instruction);
}

TEST(BenchKit, CpuIsNamedFromFamilyAndModelNumbers) {
  using attn_bench::microarchitecture;
  EXPECT_EQ(microarchitecture("AuthenticAMD", 0x1a, 0x02), "Zen 5");  // Turin
  EXPECT_EQ(microarchitecture("AuthenticAMD", 0x1a, 0x44), "Zen 5");  // Granite Ridge
  EXPECT_EQ(microarchitecture("AuthenticAMD", 0x19, 0x01), "Zen 3");  // Milan
  EXPECT_EQ(microarchitecture("AuthenticAMD", 0x19, 0x11), "Zen 4");  // Genoa
  EXPECT_EQ(microarchitecture("AuthenticAMD", 0x19, 0x61), "Zen 4");  // Raphael
  EXPECT_EQ(microarchitecture("AuthenticAMD", 0x17, 0x31), "Zen 2");  // Rome
  EXPECT_EQ(microarchitecture("GenuineIntel", 6, 0x8f), "Sapphire Rapids");
  EXPECT_EQ(microarchitecture("GenuineIntel", 6, 0x01), "");  // not guessed
  EXPECT_EQ(microarchitecture("AuthenticAMD", 0x30, 0x01), "");
  const attn_bench::CpuIdentity& id = attn_bench::cpu_identity();
  EXPECT_EQ(id.vendor, attn::detect_cpu().cpu_vendor);
  const std::string text = id.to_string();
#if defined(__x86_64__)
  EXPECT_GT(id.family, 0u);
  EXPECT_NE(text.find("family 0x"), std::string::npos) << text;
  EXPECT_NE(text.find("model 0x"), std::string::npos) << text;
#endif
  EXPECT_FALSE(text.empty());
}

}  // namespace
