#include "attn/platform.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <thread>

#include "attn/error.hpp"
#include "core/names.hpp"

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#define ATTN_X86 1
#endif

namespace attn {
namespace {

const detail::NameTable<CpuFeature>& feature_table() {
  using F = CpuFeature;
  static const detail::NameTable<F> t = {
      {F::avx2, "avx2"}, {F::fma, "fma"}, {F::avx512f, "avx512f"}, {F::avx512bw, "avx512bw"},
      {F::avx512vl, "avx512vl"}, {F::avx512_bf16, "avx512_bf16"}, {F::avx512_fp16, "avx512_fp16"},
      {F::avx512_vnni, "avx512_vnni"}, {F::amx_bf16, "amx_bf16"}, {F::amx_tile, "amx_tile"}, {F::neon, "neon"},
      {F::avx512_vbmi, "avx512_vbmi"}};
  return t;
}

void sort_unique(std::vector<CpuFeature>& f) {
  std::sort(f.begin(), f.end());
  f.erase(std::unique(f.begin(), f.end()), f.end());
}

#ifdef ATTN_X86
uint64_t xgetbv0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (uint64_t(edx) << 32) | eax;
}

Platform detect_x86() {
  Platform p;
  unsigned a = 0, b = 0, c = 0, d = 0;  // __get_cpuid leaves them unset for an unsupported leaf
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
    unsigned a1, b1, c1, d1;
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

// "cuda:<major>.<minor>": digits only, major 1..kMaxCudaMajor, minor 0..9, so that the sm_ name
// (major * 10 + minor) and every comparison stay far from int overflow.
ComputeCapability parse_compute_capability(const std::string& spec) {
  constexpr int kMaxCudaMajor = 99;
  const auto fail = [&]() -> ComputeCapability {
    throw Error("platform='" + spec + "' invalid: expected cuda:<major>.<minor> with major 1.." +
                std::to_string(kMaxCudaMajor) + " and minor 0..9, such as cuda:8.0, cuda:9.0, cuda:12.0");
  };
  const char* p = spec.c_str() + 5;
  const char* end = spec.c_str() + spec.size();
  const char* dot = std::find(p, end, '.');
  int major = -1, minor = -1;
  const auto [mp, mec] = std::from_chars(p, dot, major);
  if (mec != std::errc() || mp != dot || dot == end) return fail();
  const auto [np, nec] = std::from_chars(dot + 1, end, minor);
  if (nec != std::errc() || np != end || major < 1 || major > kMaxCudaMajor || minor < 0 || minor > 9) return fail();
  return {major, minor};
}

}  // namespace

std::string_view to_string(CpuFeature f) { return detail::name_of(feature_table(), f); }
const std::vector<CpuFeature>& all_cpu_features() {
  static const auto v = detail::values_of(feature_table());
  return v;
}

std::string ComputeCapability::to_string() const { return std::to_string(major) + "." + std::to_string(minor); }

bool Platform::has(CpuFeature f) const { return std::find(features.begin(), features.end(), f) != features.end(); }

std::string Platform::kind_name() const { return kind == PlatformKind::cpu ? "cpu" : "cuda"; }

std::string Platform::fingerprint() const {
  std::string s = kind_name();
  if (kind == PlatformKind::cuda) return s + ":" + cc.to_string();
  for (CpuFeature f : features) {
    s += '+';
    s += attn::to_string(f);
  }
  return s;
}

std::string Platform::to_string() const {
  if (kind == PlatformKind::cuda)
    return "cuda " + cc.to_string() + (name.empty() ? "" : " (" + name + ")") + (detected ? "" : " [planning target]");
  std::string feats;
  for (CpuFeature f : features) {
    if (!feats.empty()) feats += ' ';
    feats += attn::to_string(f);
  }
  return "cpu (" + (name.empty() ? cpu_vendor : name) + ", " + std::to_string(cores) + " cores, " +
         (feats.empty() ? "no SIMD extensions" : feats) + ")" + (detected ? "" : " [planning target]");
}

const Platform& detect_cpu() {
  static const Platform p = [] {
#ifdef ATTN_X86
    Platform d = detect_x86();
#else
    Platform d;
    d.cpu_vendor = "ARM";
    d.name = "aarch64";
#if defined(__aarch64__)
    d.features.push_back(CpuFeature::neon);
#endif
#endif
    d.kind = PlatformKind::cpu;
    d.cores = int(std::max(1u, std::thread::hardware_concurrency()));
    d.detected = true;
    sort_unique(d.features);
    return d;
  }();
  return p;
}

Platform parse_platform(const std::string& spec) {
  const std::string valid = "cpu, cpu:generic, cpu:avx2, cpu:avx512, cpu:avx512_bf16, cpu:neon, cuda, cuda:<major>.<minor>";
  if (spec.empty() || spec == "cpu" || spec == "native") return detect_cpu();
  if (spec.rfind("cpu:", 0) == 0) {
    const std::string level = spec.substr(4);
    Platform p;
    p.kind = PlatformKind::cpu;
    p.name = spec;
    p.cpu_vendor = "planned";
    p.cores = detect_cpu().cores;
    using F = CpuFeature;
    if (level == "generic") {
    } else if (level == "avx2") {
      p.features = {F::avx2, F::fma};
    } else if (level == "avx512") {
      p.features = {F::avx2, F::fma, F::avx512f, F::avx512bw, F::avx512vl};
    } else if (level == "avx512_bf16") {
      p.features = {F::avx2, F::fma, F::avx512f, F::avx512bw, F::avx512vl, F::avx512_bf16, F::avx512_vnni};
    } else if (level == "neon") {
      p.features = {F::neon};
    } else {
      throw Error("platform='" + spec + "' invalid: expected one of " + valid);
    }
    sort_unique(p.features);
    return p;
  }
  if (spec == "cuda") {
    Platform p;
    std::string why;
    if (!detect_cuda(p, why)) throw Error("platform='cuda' unavailable: " + why + " (plan for a GPU with cuda:<major>.<minor>, e.g. cuda:9.0)");
    return p;
  }
  if (spec.rfind("cuda:", 0) == 0) {
    const ComputeCapability cc = parse_compute_capability(spec);
    Platform p;
    p.kind = PlatformKind::cuda;
    p.cc = cc;
    p.name = "sm_" + std::to_string(cc.as_int());
    return p;
  }
  throw Error("platform='" + spec + "' invalid: expected one of " + valid);
}

}  // namespace attn
