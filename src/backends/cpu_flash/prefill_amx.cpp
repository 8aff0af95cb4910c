// Prefill path, AMX products: the two matmuls of a 16-row query group against one packed bf16
// 64-key tile, on the tile unit (TDPBF16PS: 16×16 fp32 += 16×32 bf16 · 32×16 bf16, ~6x the
// AVX-512 FMA rate on Sapphire / Emerald Rapids). The packed tiles are already in the operand
// layout the instruction wants (prefill_pack.avx512.cpp): K as dimension pairs × 64 keys, V as
// key pairs × dims. Softmax, masks and the O rescale stay in AVX-512 (prefill_tile.avx512.cpp).
// A portable file: the code lives in functions with a target attribute and runs only where the
// CPU layer granted AMX (cpu::amx_permitted, checked when the amx build is chosen).
#include "backends/cpu_flash/prefill.hpp"

#if defined(__x86_64__) && defined(__linux__)
#include "cpu/x86_intrinsics.hpp"

#define ATTN_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw")))

namespace attn::cpu_flash::prefill {
namespace {

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

constexpr int64_t kKeyRowBytes = int64_t(kTileKeys) * 4;  // one dimension pair of 64 keys

}  // namespace


// Every tile 16 rows × 64 bytes: 16 fp32 accumulators, or 32 bf16 (16 pairs) per row. Kept in
// static memory: GCC 12 drops stores to a local configuration before ldtilecfg reads it.
const TileConfig kConfig = [] {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  return cfg;
}();

ATTN_AMX_TARGET void amx_begin() { _tile_loadconfig(&kConfig); }

ATTN_AMX_TARGET void amx_end() { _tile_release(); }

ATTN_AMX_TARGET void amx_scores(const uint16_t* q, int d, const char* ktile, float* s) {
  // tmm0..3: S for keys 0-15 .. 48-63; tmm4: 32 dims of q; tmm5..7: K pair rows of 16 keys.
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const int64_t ldq = int64_t(d) * 2;
  for (int c = 0; c < d / 32; ++c) {
    _tile_loadd(4, q + 32 * c, ldq);
    const char* kc = ktile + int64_t(c) * 16 * kKeyRowBytes;  // pairs 16c .. 16c + 15
    _tile_loadd(5, kc, kKeyRowBytes);
    _tile_dpbf16ps(0, 4, 5);
    _tile_loadd(6, kc + 64, kKeyRowBytes);
    _tile_dpbf16ps(1, 4, 6);
    _tile_loadd(7, kc + 128, kKeyRowBytes);
    _tile_dpbf16ps(2, 4, 7);
    _tile_loadd(5, kc + 192, kKeyRowBytes);
    _tile_dpbf16ps(3, 4, 5);
  }
  _tile_stored(0, s, kKeyRowBytes);
  _tile_stored(1, s + 16, kKeyRowBytes);
  _tile_stored(2, s + 32, kKeyRowBytes);
  _tile_stored(3, s + 48, kKeyRowBytes);
}

ATTN_AMX_TARGET void amx_pv(const uint16_t* p, const char* vtile, int dvp, float* o) {
  // tmm2 / tmm3: P for keys 0-31 / 32-63; tmm0 / tmm1: two 16-dim blocks of O; tmm4..7: their V
  // key-pair rows for each half of the keys.
  const int64_t ld = int64_t(dvp) * 4;  // a V key-pair row and an O row: dvp × 4 bytes
  const int64_t half = 16 * ld;         // key pairs 16 .. 31
  _tile_loadd(2, p, kTileKeys * 2);
  _tile_loadd(3, p + 32, kTileKeys * 2);
  int x = 0;
  for (; x + 32 <= dvp; x += 32) {
    _tile_loadd(0, o + x, ld);
    _tile_loadd(1, o + x + 16, ld);
    _tile_loadd(4, vtile + x * 4, ld);
    _tile_loadd(5, vtile + half + x * 4, ld);
    _tile_loadd(6, vtile + (x + 16) * 4, ld);
    _tile_loadd(7, vtile + half + (x + 16) * 4, ld);
    _tile_dpbf16ps(0, 2, 4);
    _tile_dpbf16ps(0, 3, 5);
    _tile_dpbf16ps(1, 2, 6);
    _tile_dpbf16ps(1, 3, 7);
    _tile_stored(0, o + x, ld);
    _tile_stored(1, o + x + 16, ld);
  }
  if (x < dvp) {  // dvp is a multiple of 16: one block left
    _tile_loadd(0, o + x, ld);
    _tile_loadd(4, vtile + x * 4, ld);
    _tile_loadd(5, vtile + half + x * 4, ld);
    _tile_dpbf16ps(0, 2, 4);
    _tile_dpbf16ps(0, 3, 5);
    _tile_stored(0, o + x, ld);
  }
}

ATTN_AMX_TARGET void amx_scores_pair(const uint16_t* q, int d, const char* ktile, float* s) {
  // Per half of the keys (32): tmm0 / tmm1: group A's S for its two 16-key blocks, tmm2 / tmm3:
  // group B's; tmm4 / tmm5: A's / B's 32 dims of q; tmm6 / tmm7: the two K blocks (a 2x2 block).
  const int64_t ldq = int64_t(d) * 2, gq = int64_t(16) * d, gs = int64_t(16) * kTileKeys;
  for (int kh = 0; kh < 2; ++kh) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int c = 0; c < d / 32; ++c) {
      const char* kc = ktile + int64_t(c) * 16 * kKeyRowBytes + kh * 128;
      _tile_loadd(4, q + 32 * c, ldq);
      _tile_loadd(6, kc, kKeyRowBytes);
      _tile_dpbf16ps(0, 4, 6);
      _tile_loadd(7, kc + 64, kKeyRowBytes);
      _tile_dpbf16ps(1, 4, 7);
      _tile_loadd(5, q + gq + 32 * c, ldq);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    float* sh = s + kh * 32;
    _tile_stored(0, sh, kKeyRowBytes);
    _tile_stored(1, sh + 16, kKeyRowBytes);
    _tile_stored(2, sh + gs, kKeyRowBytes);
    _tile_stored(3, sh + gs + 16, kKeyRowBytes);
  }
}

ATTN_AMX_TARGET void amx_pv_pair(const uint16_t* p, const char* vtile, int dvp, float* o) {
  // Per 32 dims of O: tmm0 / tmm1 group A's two 16-dim blocks, tmm2 / tmm3 group B's; per half of
  // the keys tmm4 / tmm5: A's / B's P, tmm6 / tmm7: the V key-pair rows of the two blocks.
  const int64_t ld = int64_t(dvp) * 4, half = 16 * ld, go = int64_t(16) * dvp, gp = int64_t(16) * kTileKeys;
  const int64_t ldp = kTileKeys * 2;
  for (int x = 0; x < dvp; x += 32) {
    _tile_loadd(0, o + x, ld);
    _tile_loadd(1, o + x + 16, ld);
    _tile_loadd(2, o + go + x, ld);
    _tile_loadd(3, o + go + x + 16, ld);
    for (int kh = 0; kh < 2; ++kh) {
      const char* vh = vtile + kh * half;
      _tile_loadd(4, p + kh * 32, ldp);
      _tile_loadd(6, vh + x * 4, ld);
      _tile_dpbf16ps(0, 4, 6);
      _tile_loadd(7, vh + (x + 16) * 4, ld);
      _tile_dpbf16ps(1, 4, 7);
      _tile_loadd(5, p + gp + kh * 32, ldp);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, o + x, ld);
    _tile_stored(1, o + x + 16, ld);
    _tile_stored(2, o + go + x, ld);
    _tile_stored(3, o + go + x + 16, ld);
  }
}

}  // namespace attn::cpu_flash::prefill

#else

namespace attn::cpu_flash::prefill {
void amx_begin() {}
void amx_end() {}
void amx_scores(const uint16_t*, int, const char*, float*) {}
void amx_pv(const uint16_t*, const char*, int, float*) {}
void amx_scores_pair(const uint16_t*, int, const char*, float*) {}
void amx_pv_pair(const uint16_t*, const char*, int, float*) {}
}  // namespace attn::cpu_flash::prefill

#endif
