// The portable table (64-bit integer loads, no FMA figure) and the run-time choice of table.
#include "bench_simd.hpp"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "attn/platform.hpp"
#include "bench_paged_rows.hpp"

namespace attn_bench {
namespace {

uint64_t read_sum(const void* p, std::size_t bytes) {
  const auto* q = static_cast<const uint64_t*>(p);
  uint64_t a[8] = {};
  for (std::size_t i = 0; i < bytes / 8; i += 8)
    for (int j = 0; j < 8; ++j) a[j] += q[i + j];
  uint64_t s = 0;
  for (uint64_t x : a) s += x;
  return s;
}

void add_row(uint64_t* a, const std::byte* p, int32_t bytes) {
  for (int32_t off = 0; off + 8 <= bytes; off += 8) {
    uint64_t w;
    std::memcpy(&w, p + off, 8);
    a[(off / 8) & 3] += w;
  }
}

uint64_t paged_sum(const PagedRows& r) {
  uint64_t a[8] = {};
  walk_paged_rows(
      r, [&](const std::byte* k, const std::byte* v) { add_row(a, k, r.k_bytes), add_row(a + 4, v, r.v_bytes); });
  uint64_t s = 0;
  for (uint64_t x : a) s += x;
  return s;
}

const SimdKernels kPortable{"64-bit scalar loads", read_sum, paged_sum, "none (no FMA unit found)", nullptr, "", nullptr};

}  // namespace

// Linux keeps AMX tile data off until the process asks (ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA); the grant is process-wide, so one request serves every thread.
bool amx_granted() {
  static const bool ok = [] {
    const attn::Platform& p = attn::detect_cpu();
    if (!p.has(attn::CpuFeature::amx_tile) || !p.has(attn::CpuFeature::amx_bf16)) return false;
#if defined(__x86_64__) && defined(__linux__)
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return ok;
}

const SimdKernels& simd_portable() { return kPortable; }

const SimdKernels& simd() {
  static const SimdKernels* chosen = [] {
    using attn::CpuFeature;
    const attn::Platform& p = attn::detect_cpu();
    const bool avx512 = p.has(CpuFeature::avx512f) && p.has(CpuFeature::avx512bw) && p.has(CpuFeature::avx512vl);
    if (avx512 && simd_avx512()) return simd_avx512();
    if (p.has(CpuFeature::avx2) && p.has(CpuFeature::fma) && simd_avx2()) return simd_avx2();
    return &kPortable;
  }();
  return *chosen;
}

}  // namespace attn_bench
