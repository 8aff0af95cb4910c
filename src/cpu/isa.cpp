#include "cpu/isa.hpp"

#include <algorithm>
#include <cstdlib>

#include "attn/error.hpp"

#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace attn::cpu {
namespace {

bool has_all(const Platform& p, std::initializer_list<CpuFeature> features) {
  return std::all_of(features.begin(), features.end(), [&](CpuFeature f) { return p.has(f); });
}

/// The features each build's files are compiled for (CMake's ATTN_ISA_FLAGS_<isa>).
bool runs(const Platform& p, Isa isa) {
  using F = CpuFeature;
  if (p.kind != PlatformKind::cpu) return isa == Isa::generic;
  switch (isa) {
    case Isa::amx: return runs(p, Isa::avx512_bf16) && has_all(p, {F::amx_tile, F::amx_bf16}) && (!p.detected || amx_permitted());
    case Isa::avx512_bf16: return runs(p, Isa::avx512) && p.has(F::avx512_bf16);
    case Isa::avx512: return has_all(p, {F::avx512f, F::avx512bw, F::avx512vl});
    case Isa::avx2: return has_all(p, {F::avx2, F::fma});
    default: return true;
  }
}

Isa round_down(Isa isa, std::initializer_list<Isa> family) {
  Isa out = Isa::generic;
  for (Isa f : family)
    if (f <= isa && f > out) out = f;
  return out;
}

}  // namespace

std::string_view to_string(Isa isa) {
  switch (isa) {
    case Isa::amx: return "amx";
    case Isa::avx512_bf16: return "avx512_bf16";
    case Isa::avx512: return "avx512";
    case Isa::avx2: return "avx2";
    default: return "generic";
  }
}

const std::vector<Isa>& all_isas() {
  static const std::vector<Isa> v = {Isa::amx, Isa::avx512_bf16, Isa::avx512, Isa::avx2, Isa::generic};
  return v;
}

bool amx_permitted() {
#if defined(__x86_64__) && defined(__linux__)
  static const bool ok = [] {
    const Platform& p = detect_cpu();
    if (!p.has(CpuFeature::amx_tile) || !p.has(CpuFeature::amx_bf16)) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
#else
  return false;
#endif
}

Isa best_isa(const Platform& p) {
#if defined(__x86_64__) || defined(_M_X64)
  for (Isa isa : all_isas())
    if (runs(p, isa)) return isa;
#else
  (void)p;
#endif
  return Isa::generic;
}

std::vector<Isa> runnable_isas(const Platform& p) {
  std::vector<Isa> out;
  for (Isa isa : all_isas())
    if (isa <= best_isa(p)) out.push_back(isa);
  return out;
}

std::string join(const std::vector<Isa>& isas) {
  std::string s;
  for (Isa isa : isas) s += (s.empty() ? "" : ", ") + std::string(to_string(isa));
  return s;
}

std::optional<Isa> forced_isa() {
  const char* env = std::getenv(kIsaEnv);
  if (!env || !*env || std::string_view(env) == "auto") return std::nullopt;
  const std::string_view want(env);
  for (Isa isa : all_isas())
    if (want == to_string(isa)) return isa;
  throw Error(std::string(kIsaEnv) + "=" + env + " invalid: expected one of auto, " + join(all_isas()));
}

Isa best_of(const Platform& p, std::initializer_list<Isa> family) { return round_down(best_isa(p), family); }

Isa choose(const Platform& p, std::initializer_list<Isa> family) {
  const Isa best = best_isa(p);
  const std::optional<Isa> forced = forced_isa();
  if (forced && *forced > best && p.detected)
    throw Error(std::string(kIsaEnv) + "=" + std::getenv(kIsaEnv) + " invalid: this CPU runs " + join(runnable_isas(p)));
  return round_down(forced ? std::min(*forced, best) : best, family);
}

}  // namespace attn::cpu
