#pragma once
/// The machine a decision is made for: this CPU (detected) or a named target ("cpu:avx2",
/// "cuda:9.0") so users can plan for machines they are not on.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attn {

enum class PlatformKind : uint8_t { cpu, cuda };
std::string_view to_string(PlatformKind k);  // "cpu" / "cuda"

/// CPU ISA features attn cares about.
enum class CpuFeature : uint8_t { avx2, fma, avx512f, avx512bw, avx512vl, avx512_bf16, avx512_fp16, avx512_vnni, amx_bf16, amx_tile, neon, avx512_vbmi };
std::string_view to_string(CpuFeature f);
const std::vector<CpuFeature>& all_cpu_features();

struct ComputeCapability {
  int major = 0, minor = 0;
  int as_int() const { return major * 10 + minor; }
  auto operator<=>(const ComputeCapability&) const = default;
  std::string to_string() const;  // "9.0"
};

struct Platform {
  PlatformKind kind = PlatformKind::cpu;
  std::string name;                // "Intel(R) Xeon(R) ..." / "NVIDIA H100" / "cuda:9.0 (planned)"
  std::string cpu_vendor;          // GenuineIntel / AuthenticAMD / ARM
  int cores = 1;
  std::vector<CpuFeature> features;  // sorted, unique
  ComputeCapability cc;             // cuda only
  bool detected = false;            // true: this machine; false: a planning target

  bool has(CpuFeature f) const;
  /// Stable text identifying everything a capability check can read (the cache key part).
  std::string fingerprint() const;
  std::string to_string() const;   // "cpu (GenuineIntel, 2 cores, avx2 fma avx512f ...)"
  std::string kind_name() const;   // "cpu" / "cuda"
};

/// This machine's CPU (memoized). CUDA is never reported here; see detect_cuda().
const Platform& detect_cpu();
/// The first CUDA device when the cuda module is built and a device is present.
/// Returns false (with `why`) otherwise.
bool detect_cuda(Platform& out, std::string& why);
/// "cpu" (this CPU), "cpu:avx2" / "cpu:avx512" / "cpu:avx512_bf16" / "cpu:generic" (planning
/// targets with that ISA level), "cuda" (the detected GPU), "cuda:9.0" (planning target).
Platform parse_platform(const std::string& spec);

}  // namespace attn
