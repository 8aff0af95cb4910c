// The last-level cache of this machine and the pool rule that keeps bandwidth figures honest:
// data rotated over at least 4× the LLC cannot be served from it (dram_pool_min in bench_kit.hpp).
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "testkit/bench_kit.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace attn_bench {
namespace {

constexpr std::size_t kMiB = std::size_t(1) << 20;

std::string read_line(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::string s;
  std::getline(f, s);
  return s;
}

// sysfs "size" is "32768K" / "260M".
std::size_t parse_size(const std::string& s) {
  std::size_t n = 0, i = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') n = n * 10 + std::size_t(s[i++] - '0');
  if (i < s.size() && (s[i] == 'K' || s[i] == 'k')) n <<= 10;
  if (i < s.size() && (s[i] == 'M' || s[i] == 'm')) n <<= 20;
  if (i < s.size() && (s[i] == 'G' || s[i] == 'g')) n <<= 30;
  return n;
}

// Every CPU's deepest data cache; an instance shared by several CPUs is counted once (by its
// shared_cpu_list), so two sockets count two L3s and one socket with one L3 counts one.
LastLevelCache from_sysfs() {
  namespace fs = std::filesystem;
  LastLevelCache best;
  std::set<std::string> seen;
  std::error_code ec;
  for (const auto& cpu : fs::directory_iterator("/sys/devices/system/cpu", ec)) {
    const std::string name = cpu.path().filename().string();
    if (name.rfind("cpu", 0) != 0 || name.size() < 4 || !std::isdigit(static_cast<unsigned char>(name[3]))) continue;
    for (const auto& idx : fs::directory_iterator(cpu.path() / "cache", ec)) {
      if (read_line(idx.path() / "type") == "Instruction") continue;
      const int level = std::atoi(read_line(idx.path() / "level").c_str());
      const std::size_t size = parse_size(read_line(idx.path() / "size"));
      if (level < best.level || size == 0) continue;
      if (level > best.level) best = LastLevelCache{0, level, 0, "sysfs"}, seen.clear();
      if (seen.insert(read_line(idx.path() / "shared_cpu_list")).second) best.bytes += size, ++best.instances;
    }
  }
  return best;
}

LastLevelCache from_sysconf() {
#if defined(_SC_LEVEL3_CACHE_SIZE)
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (l3 > 0) return {std::size_t(l3), 3, 1, "sysconf"};
  if (l2 > 0) return {std::size_t(l2), 2, 1, "sysconf"};
#endif
  return {};
}

// Deterministic cache parameters: leaf 4 (Intel) or 0x8000001D (AMD), same layout.
LastLevelCache from_cpuid() {
  LastLevelCache best;
#if defined(__x86_64__)
  for (unsigned leaf : {4u, 0x8000001Du}) {
    if (static_cast<unsigned>(__get_cpuid_max(leaf & 0x80000000u, nullptr)) < leaf) continue;  // int in clang, unsigned in gcc
    for (unsigned sub = 0; sub < 16; ++sub) {
      unsigned a, b, c, d;
      __cpuid_count(leaf, sub, a, b, c, d);
      const unsigned type = a & 0x1f, level = (a >> 5) & 0x7;
      if (type == 0) break;
      if (type == 2) continue;  // instruction cache
      const std::size_t size = std::size_t((b >> 22) + 1) * (((b >> 12) & 0x3ff) + 1) * ((b & 0xfff) + 1) * (c + 1);
      if (int(level) >= best.level) best = {size, int(level), 1, "cpuid"};
    }
    if (best.bytes) break;
  }
#endif
  return best;
}

}  // namespace

const LastLevelCache& last_level_cache() {
  static const LastLevelCache llc = [] {
    for (auto probe : {from_sysfs, from_sysconf, from_cpuid}) {
      LastLevelCache c = probe();
      if (c.bytes) return c;
    }
    return LastLevelCache{0, 0, 0, "unknown"};
  }();
  return llc;
}

std::size_t dram_pool_bytes() {
  const std::size_t llc = last_level_cache().bytes;
  return llc ? dram_pool_min(llc) : 1024 * kMiB;
}

Pool choose_pool(bool quick) {
  const std::size_t llc = last_level_cache().bytes, dram_pool = dram_pool_bytes();
  Pool p;
  p.bytes = quick ? std::min<std::size_t>(dram_pool, 64 * kMiB) : std::max<std::size_t>(dram_pool, 64 * kMiB);
  p.dram = llc && p.bytes >= dram_pool_min(llc);
  return p;
}

}  // namespace attn_bench
