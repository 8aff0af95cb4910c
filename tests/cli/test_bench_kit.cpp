// The bench kit behind `attn bench`: the pool rule, the rotation of instances, and the paged-read
// ceiling reading exactly the KV bytes a decode call reads, on every ISA table this build has.
#include <gtest/gtest.h>

#include <cstring>

#include "bench_kit.hpp"
#include "bench_simd.hpp"

namespace {

using attn_bench::Shape;
constexpr std::size_t kMiB = std::size_t(1) << 20;

std::vector<const attn_bench::SimdKernels*> tables_this_cpu_runs() {
  std::vector<const attn_bench::SimdKernels*> out{&attn_bench::simd_portable()};
  const attn::Platform& p = attn::detect_cpu();
  if (attn_bench::simd_avx2() && p.has(attn::CpuFeature::avx2)) out.push_back(attn_bench::simd_avx2());
  if (attn_bench::simd_avx512() && p.has(attn::CpuFeature::avx512bw)) out.push_back(attn_bench::simd_avx512());
  return out;
}

// The tables sum 32-bit lanes (vector) or 64-bit words (portable); with every 32-bit word of
// the cache set to 1 both come to the number of words read.
uint64_t words(const attn_bench::SimdKernels* k, uint64_t sum) {
  return k == &attn_bench::simd_portable() ? (sum & 0xffffffffu) + (sum >> 32) : sum;
}

TEST(BenchKit, PagedReadReadsExactlyTheDecodeKvBytesOnEveryIsa) {
  Shape llama, fp8_h64, fp8_h32, bf16_h80, window;
  llama.batch = 2, llama.context = 3000;
  fp8_h64.kv = fp8_h32.kv = attn::KVCacheDType::fp8_e4m3;
  fp8_h64.head_size = 64, fp8_h32.head_size = 32, bf16_h80.head_size = 80;  // rows of 64, 32 and 160 bytes
  window.heads = 64, window.head_size = 64, window.window = 128, window.batch = 3;
  for (const Shape& s : {llama, fp8_h64, fp8_h32, bf16_h80, window}) {
    SCOPED_TRACE(std::to_string(s.head_size) + (s.window ? " window" : ""));
    attn_bench::Workload w(s, "cpu_flash", 1, 4 * kMiB);
    auto* p = static_cast<uint32_t*>(w.cache().data());
    std::fill(p, p + w.cache().bytes() / 4, 1u);
    for (const attn_bench::SimdKernels* k : tables_this_cpu_runs()) {
      uint64_t total = 0;
      for (const attn_bench::PagedRows& r : w.paged_rows(0)) total += words(k, k->paged_sum(r));
      EXPECT_EQ(double(total) * 4, w.kv_bytes()) << k->read_instruction;
    }
  }
}

TEST(BenchKit, DecodeItemsFollowThePlanSplit) {
  Shape s;  // 4097 keys: splits at 0, 1024, 2048, 3072 and 4096 per (sequence, kv head)
  s.batch = 3;
  attn_bench::Workload w(s, "cpu_flash", 1, 0);
  const auto items = w.paged_rows(0);
  EXPECT_EQ(items.size(), std::size_t(3 * 8 * 5));
  EXPECT_EQ(items.front().end - items.front().begin, 1024);
  EXPECT_EQ(items.back().end - items.back().begin, 1);  // largest first
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
  const attn_bench::LastLevelCache& llc = attn_bench::last_level_cache();
  const attn_bench::Pool full = attn_bench::choose_pool(false), quick = attn_bench::choose_pool(true);
  if (llc.bytes) {
    EXPECT_GE(full.bytes, 4 * llc.bytes);
    EXPECT_TRUE(full.dram);
  } else {
    EXPECT_FALSE(full.dram);  // unknown LLC: never claimed as DRAM figures
  }
  EXPECT_LE(quick.bytes, 64 * kMiB);
  EXPECT_EQ(quick.dram, llc.bytes && quick.bytes >= 4 * llc.bytes);
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

}  // namespace
