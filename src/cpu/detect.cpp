#include "cpu/detect.hpp"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#define ATTN_X86 1
#endif

namespace attn::cpu {
namespace {

#ifdef ATTN_X86
uint64_t xgetbv0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (uint64_t(edx) << 32) | eax;
}

Platform detect_x86() {
  Platform p;
  unsigned a = 0, b = 0, c = 0, d = 0;  // __get_cpuid leaves them unset for a leaf the CPU lacks
  char vendor[13] = {};
  __get_cpuid(0, &a, &b, &c, &d);
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  p.cpu_vendor = vendor;
  const unsigned max_leaf = a;

  __get_cpuid(1, &a, &b, &c, &d);
  const bool osxsave = c & (1u << 27);
  const bool fma = c & (1u << 12);
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;
  const bool os_avx512 = (xcr0 & 0xe6) == 0xe6;
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;

  using F = CpuFeature;
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    if (os_avx && (b & (1u << 5))) p.features.push_back(F::avx2);
    if (os_avx && fma) p.features.push_back(F::fma);
    if (os_avx512) {
      if (b & (1u << 16)) p.features.push_back(F::avx512f);
      if (b & (1u << 30)) p.features.push_back(F::avx512bw);
      if (b & (1u << 31)) p.features.push_back(F::avx512vl);
      if (c & (1u << 11)) p.features.push_back(F::avx512_vnni);
      if (c & (1u << 1)) p.features.push_back(F::avx512_vbmi);
      if (d & (1u << 23)) p.features.push_back(F::avx512_fp16);
    }
    if (os_amx) {
      if (d & (1u << 22)) p.features.push_back(F::amx_bf16);
      if (d & (1u << 24)) p.features.push_back(F::amx_tile);
    }
    unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
    __cpuid_count(7, 1, a1, b1, c1, d1);
    if (os_avx512 && (a1 & (1u << 5))) p.features.push_back(F::avx512_bf16);
  }
  char brand[49] = {};
  unsigned ext = 0;
  __get_cpuid(0x80000000, &ext, &b, &c, &d);
  if (ext >= 0x80000004) {
    for (unsigned i = 0; i < 3; ++i) __get_cpuid(0x80000002 + i, reinterpret_cast<unsigned*>(brand + 16 * i),
                                                reinterpret_cast<unsigned*>(brand + 16 * i + 4),
                                                reinterpret_cast<unsigned*>(brand + 16 * i + 8),
                                                reinterpret_cast<unsigned*>(brand + 16 * i + 12));
  }
  p.name = brand;
  while (!p.name.empty() && p.name.back() == ' ') p.name.pop_back();
  return p;
}
#endif

}  // namespace

Platform detect_features() {
#ifdef ATTN_X86
  return detect_x86();
#else
  Platform d;
  d.cpu_vendor = "ARM";
  d.name = "aarch64";
#if defined(__aarch64__)
  d.features.push_back(CpuFeature::neon);
#endif
  return d;
#endif
}

}  // namespace attn::cpu
