// Prefill path, AMX driver of the tile phase (the pipeline: prefill_tile.hpp): steps 1 and 3 of
// a key tile on the tile unit (prefill_amx.cpp) for 16-row groups, step 2 on AVX-512 over the
// scores in memory. Built with the AVX-512 flags like the tile loop that calls it.
#define ATTN_CF_NS prefill_avx512
#include "backends/cpu_flash/prefill_tile.hpp"

namespace attn::cpu_flash::prefill::tile {
namespace {

/// AMX P·V for a V tile holding inf / NaN: the tile product runs on a copy with those values
/// zeroed (so rows that do not see their keys add exact zeros, as with finite values), then each
/// row adds p · value for the ones it sees, as the reference does.
void pv_amx_nonfinite(const Ctx& cx, int g0, int rows, const char* vtile, int32_t key0, uint16_t* clean) {
  const auto* v = reinterpret_cast<const uint16_t*>(vtile);
  const int64_t n = int64_t(kTileKeys) * cx.dvp;
  for (int64_t i = 0; i < n; ++i) clean[i] = bf16_nonfinite(v[i]) ? uint16_t(0) : v[i];
  amx_pv(cx.pb + g0 * kTileKeys, reinterpret_cast<const char*>(clean), cx.dvp, cx.o + int64_t(g0) * cx.dvp);
  for (int r = g0; r < std::min(g0 + 16, rows); ++r) {
    const int kb = std::max(0, cx.lo[r] - key0), ke = std::min(kTileKeys, cx.hi[r] - key0 + 1);
    for (int k = kb; k < ke; ++k) {
      const float p = bf16_to_f32(cx.pb[r * kTileKeys + k]);
      for (int x = 0; x < cx.dvp; ++x) {
        const uint16_t b = v[2 * (int64_t(k / 2) * cx.dvp + x) + (k & 1)];
        if (bf16_nonfinite(b)) cx.o[int64_t(r) * cx.dvp + x] += p * bf16_to_f32(b);
      }
    }
  }
}

}  // namespace

/// One key tile on AMX for the 16-row groups that see some of it, two groups at a time where both
/// do (each K / V tile load then serves 32 rows): S on the tile unit, the softmax step per 4-row
/// micro-tile over the whole tile, O rescaled in memory, P·V on the unit. Software-pipelined one
/// unit deep: the next unit's S is issued to the tile unit before this unit's softmax, so the
/// unit computes it while the vector units run the softmax (the two phases of one unit depend on
/// each other; those of neighbouring units do not).
void amx_key_tile(const KernelArgs& a, const PackLayout& L, const Ctx& cx, Scratch& sc, int rows, int rp, const char* kt,
                  const char* vt, int32_t key0) {
  static constexpr std::array<std::array<QkFn, 2>, 2> kQkS = {{
      {{&qk_softmax<true, 4, false, false, true>, &qk_softmax<true, 4, true, false, true>}},
      {{&qk_softmax<true, 4, false, true, true>, &qk_softmax<true, 4, true, true, true>}},
  }};
  const bool cap = a.soft_cap > 0, nonfinite_v = vt[L.v_tile_bytes - kVFlagBytes] != 0;
  const int32_t last = key0 + kTileKeys - 1;
  // Rows grow in position: a group's last row sees the furthest, its first the earliest.
  const auto sees = [&](int g0) { return g0 < rp && sc.hi[std::size_t(g0 + 15)] >= key0 && sc.lo[std::size_t(g0)] <= last; };
  struct Unit {
    int g0 = 0, groups = 0;  // first row, 16-row groups (0: none left)
  };
  // The next unit from the 32-row slot u0 on: both of its groups where both see the tile, else
  // the one that does.
  const auto next_unit = [&](int u0) {
    for (; u0 < rp; u0 += 32) {
      const bool a0 = sees(u0), a1 = sees(u0 + 16);
      if (a0 || a1) return Unit{a0 ? u0 : u0 + 16, a0 && a1 ? 2 : 1};
    }
    return Unit{};
  };
  const auto slot_after = [](const Unit& u) { return (u.g0 / 32 + 1) * 32; };
  const auto scores = [&](const Unit& u) {
    if (g_stage_mask & kSkipQk) return;
    float* s = sc.s.data() + int64_t(u.g0) * kTileKeys;
    if (u.groups == 2)
      amx_scores_pair(cx.qb + int64_t(u.g0) * cx.d, cx.d, kt, s);
    else
      amx_scores(cx.qb + int64_t(u.g0) * cx.d, cx.d, kt, s);
  };
  Unit u = next_unit(0);
  if (u.groups) scores(u);
  while (u.groups) {
    const Unit n = next_unit(slot_after(u));
    if (n.groups) scores(n);
    const int end = u.g0 + 16 * u.groups;
    for (int r0 = u.g0; r0 < end; r0 += R) {
      const bool mask = sc.hi[std::size_t(r0)] < last || sc.lo[std::size_t(r0 + R - 1)] > key0;
      kQkS[cap][mask](cx, r0, kt, 0, key0);
    }
    if (nonfinite_v && L.token) {  // a NaN V scale makes P itself NaN for masked keys: skip them per row
      for (int r0 = u.g0; r0 < end; r0 += R) pv_guarded<true>(cx, r0, vt, key0, 0, kTileKeys);
    } else {
      for (int r = u.g0; r < end; ++r) {
        if (cx.alpha[r] == 1.0f) continue;
        const __m512 al = _mm512_set1_ps(cx.alpha[r]);
        float* o = cx.o + int64_t(r) * cx.dvp;
        for (int x = 0; x < cx.dvp; x += 16) _mm512_storeu_ps(o + x, _mm512_mul_ps(_mm512_loadu_ps(o + x), al));
      }
      if (g_stage_mask & kSkipPv) {
      } else if (nonfinite_v) {
        for (int g0 = u.g0; g0 < end; g0 += 16) pv_amx_nonfinite(cx, g0, rows, vt, key0, sc.vclean.data());
      } else if (u.groups == 2) {
        amx_pv_pair(cx.pb + u.g0 * kTileKeys, vt, cx.dvp, cx.o + int64_t(u.g0) * cx.dvp);
      } else {
        amx_pv(cx.pb + u.g0 * kTileKeys, vt, cx.dvp, cx.o + int64_t(u.g0) * cx.dvp);
      }
    }
    u = n;
  }
}

}  // namespace attn::cpu_flash::prefill::tile
