// The CPU named from cpuid's vendor, family and model numbers. Brand strings on cloud VMs say
// little ("AMD EPYC"), and a figure is only comparable with another machine's when both name the
// microarchitecture the same way.
#include <cstdio>

#include "attn/platform.hpp"
#include "testkit/bench_kit.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace attn_bench {
namespace {

struct ModelRange {
  unsigned family, first, last;
  const char* name;
};

// AMD: family 0x17 Zen/Zen+/Zen 2, 0x19 Zen 3/Zen 4 (interleaved model ranges), 0x1A Zen 5.
constexpr ModelRange kAmd[] = {
    {0x17, 0x00, 0x2f, "Zen or Zen+"}, {0x17, 0x30, 0xaf, "Zen 2"},  {0x19, 0x00, 0x0f, "Zen 3"},
    {0x19, 0x10, 0x1f, "Zen 4"},       {0x19, 0x20, 0x3f, "Zen 3"},  {0x19, 0x40, 0x4f, "Zen 3+"},
    {0x19, 0x50, 0x5f, "Zen 3"},       {0x19, 0x60, 0x7f, "Zen 4"},  {0x19, 0xa0, 0xaf, "Zen 4"},
    {0x1a, 0x00, 0x4f, "Zen 5"},       {0x1a, 0x60, 0x7f, "Zen 5"},
};

// Intel family 6, the server parts a shared VM runs on and recent client cores.
constexpr ModelRange kIntel[] = {
    {6, 0x3f, 0x3f, "Haswell-EP"},       {6, 0x4f, 0x4f, "Broadwell-EP"},   {6, 0x55, 0x55, "Skylake-SP / Cascade Lake"},
    {6, 0x6a, 0x6a, "Ice Lake-SP"},      {6, 0x6c, 0x6c, "Ice Lake-SP"},    {6, 0x8f, 0x8f, "Sapphire Rapids"},
    {6, 0xcf, 0xcf, "Emerald Rapids"},   {6, 0xad, 0xae, "Granite Rapids"}, {6, 0xaf, 0xaf, "Sierra Forest"},
    {6, 0x8c, 0x8d, "Tiger Lake"},       {6, 0x97, 0x9a, "Alder Lake"},     {6, 0xb7, 0xb7, "Raptor Lake"},
    {6, 0xba, 0xba, "Raptor Lake"},      {6, 0xbf, 0xbf, "Raptor Lake"},    {6, 0x9e, 0x9e, "Coffee Lake"},
};

template <std::size_t N>
std::string lookup(const ModelRange (&table)[N], unsigned family, unsigned model) {
  for (const ModelRange& r : table)
    if (r.family == family && model >= r.first && model <= r.last) return r.name;
  return "";
}

CpuIdentity detect() {
  CpuIdentity id;
  const attn::Platform& p = attn::detect_cpu();
  id.vendor = p.cpu_vendor;
  id.brand = p.name;
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    const unsigned base_family = (a >> 8) & 0xf, base_model = (a >> 4) & 0xf;
    id.family = base_family == 0xf ? base_family + ((a >> 20) & 0xff) : base_family;
    id.model = base_family == 0xf || base_family == 6 ? (((a >> 16) & 0xf) << 4) | base_model : base_model;
  }
#endif
  id.microarchitecture = microarchitecture(id.vendor, id.family, id.model);
  return id;
}

}  // namespace

std::string microarchitecture(const std::string& vendor, unsigned family, unsigned model) {
  if (vendor == "AuthenticAMD") return lookup(kAmd, family, model);
  if (vendor == "GenuineIntel") return lookup(kIntel, family, model);
  return "";
}

std::string CpuIdentity::to_string() const {
  if (family == 0) return brand.empty() ? vendor : brand;
  char numbers[64];
  std::snprintf(numbers, sizeof numbers, " family 0x%x model 0x%02x", family, model);
  const std::string who = vendor == "AuthenticAMD" ? "AMD" : vendor == "GenuineIntel" ? "Intel" : vendor;
  return who + numbers + " (" + (microarchitecture.empty() ? "microarchitecture not in attn's table" : microarchitecture) +
         ")" + (brand.empty() ? "" : ", " + brand);
}

const CpuIdentity& cpu_identity() {
  static const CpuIdentity id = detect();
  return id;
}

}  // namespace attn_bench
