// AMX ceiling: tdpbf16ps on four accumulator tiles fed by two A and two B tiles (a 2×2 block,
// the shape a GEMM micro-kernel uses), so four products are in flight against the unit's
// latency. Runs only after amx_granted() (bench_simd.cpp) said the OS gave tile data.
#include <cstdint>

#include "testkit/bench_simd.hpp"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
#include <immintrin.h>

namespace attn_bench {
namespace {

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

}  // namespace

double amx_tdpbf16ps(long iters) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;  // 16 rows × 64 bytes each
  _tile_loadconfig(&cfg);
  alignas(64) uint16_t ab[16 * 32];
  for (auto& x : ab) x = 0x3a00;  // bf16 ~5e-4: sums stay finite over any run
  alignas(64) float c[16 * 16];
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, ab, 64);
  _tile_loadd(5, ab, 64);
  _tile_loadd(6, ab, 64);
  _tile_loadd(7, ab, 64);
  for (long it = 0; it < iters; ++it) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, 64);
  _tile_release();
  volatile float sink = c[0];
  (void)sink;
  return double(iters) * 4 * 16 * 16 * 32 * 2;
}

}  // namespace attn_bench

#else
namespace attn_bench {
double amx_tdpbf16ps(long) { return 0; }
}  // namespace attn_bench
#endif
