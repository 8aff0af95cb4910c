#include "attn/platform.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <thread>

#include "attn/error.hpp"
#include "core/names.hpp"
#include "cpu/detect.hpp"


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

std::string_view to_string(PlatformKind k) {
  static const detail::NameTable<PlatformKind> t = {{PlatformKind::cpu, "cpu"}, {PlatformKind::cuda, "cuda"}};
  return detail::name_of(t, k);
}

std::string_view to_string(CpuFeature f) { return detail::name_of(feature_table(), f); }
const std::vector<CpuFeature>& all_cpu_features() {
  static const auto v = detail::values_of(feature_table());
  return v;
}

std::string ComputeCapability::to_string() const { return std::to_string(major) + "." + std::to_string(minor); }

bool Platform::has(CpuFeature f) const { return std::find(features.begin(), features.end(), f) != features.end(); }

std::string Platform::kind_name() const { return std::string(attn::to_string(kind)); }

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
    Platform d = cpu::detect_features();
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
