#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string_view>

#include "attn/error.hpp"
#include "attn/limits.hpp"

namespace attn {
namespace {

constexpr const char* kSizeForm = "a size such as 8G, 512M, 64KiB or 4096 (bytes), greater than 0";

// Bytes of "<Field>:  <n> kB" in /proc/meminfo, 0 when absent.
uint64_t meminfo_bytes(const char* field) {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == std::string(field) + ":") return kib * 1024;
  }
  return 0;
}

// A container's limit is invisible in /proc/meminfo, and exceeding it is an OOM kill, so the
// cgroup (v2) headroom caps what counts as available.
uint64_t cgroup_headroom() {
  std::ifstream max_file("/sys/fs/cgroup/memory.max"), cur_file("/sys/fs/cgroup/memory.current");
  std::string max_text;
  uint64_t current = 0;
  if (!(max_file >> max_text) || max_text == "max" || !(cur_file >> current)) return UINT64_MAX;
  const uint64_t max = std::strtoull(max_text.c_str(), nullptr, 10);
  return max > current ? max - current : 0;
}

// What the budget's fraction is taken of, and where the figure came from.
uint64_t available_memory(std::string& source) {
  uint64_t avail = meminfo_bytes("MemAvailable");
  source = "MemAvailable";
  if (avail == 0) {
    avail = uint64_t(sysconf(_SC_AVPHYS_PAGES)) * uint64_t(sysconf(_SC_PAGESIZE));
    source = "available physical pages";
  }
  const uint64_t cg = cgroup_headroom();
  if (cg < avail) {
    avail = cg;
    source = "cgroup memory.max headroom";
  }
  return avail;
}

}  // namespace

uint64_t parse_byte_size(const std::string& name, const std::string& text) {
  const auto fail = [&]() -> uint64_t { throw Error(name + "='" + text + "' invalid: expected " + kSizeForm); };
  double value = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || !std::isfinite(value) || value <= 0) return fail();
  std::string_view unit(p, std::size_t(end - p));
  double scale = 1;
  if (!unit.empty()) {
    const std::string_view prefixes = "KMGT";
    const std::size_t at = prefixes.find(char(std::toupper(static_cast<unsigned char>(unit[0]))));
    if (at != std::string_view::npos) {
      scale = std::pow(1024.0, double(at + 1));
      unit.remove_prefix(1);
      if (unit == "iB" || unit == "ib") unit = {};
    }
    if (unit == "B" || unit == "b") unit = {};
  }
  const double bytes = value * scale;
  if (!unit.empty() || bytes < 1 || bytes >= 18446744073709551616.0) return fail();
  return uint64_t(bytes);
}

MemoryBudget memory_budget(const std::string& override_name, const std::string& override_text) {
  MemoryBudget b;
  if (!override_name.empty() && !override_text.empty()) {
    b.bytes = parse_byte_size(override_name, override_text);
    b.source = override_name + "=" + override_text;
    return b;
  }
  if (const char* env = std::getenv(limits::kMemoryLimitEnv); env && *env) {
    b.bytes = parse_byte_size(limits::kMemoryLimitEnv, env);
    b.source = std::string(limits::kMemoryLimitEnv) + "=" + env;
    return b;
  }
  std::string from;
  const uint64_t avail = available_memory(from);
  b.bytes = uint64_t(double(avail) * limits::kDefaultMemoryFraction);
  b.source = std::to_string(int(limits::kDefaultMemoryFraction * 100 + 0.5)) + "% of " + from + " " + format_bytes(avail);
  return b;
}

void check_memory(const std::string& what, uint64_t bytes, const MemoryBudget& budget, const std::string& hint) {
  if (bytes <= budget.bytes) return;
  throw Error(what + "=" + format_bytes(bytes) + " invalid: expected at most " + format_bytes(budget.bytes) +
              " (the memory budget: " + budget.source + "; " + hint + ")");
}

std::string format_bytes(uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " bytes";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = double(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 5) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace attn
