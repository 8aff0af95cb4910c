#pragma once
/// The prefill path of cpu_flash: query tiles with many rows run on register-blocked matmul
/// micro-kernels over K/V repacked once per call, instead of the general item kernel.
///
/// Phases of one forward call (each in its own file):
///   plan  (prefill_plan.cpp)          which items take this path; the packed K/V layout
///   pack  (prefill_pack.avx512.cpp)   K and V of every (sequence, KV head) into 64-key tiles,
///                                     once, shared by every query tile of the group
///   tile  (prefill_tile.avx512.cpp)   Q·Kᵀ + fused online softmax + P·V per query tile
///   amx   (prefill_amx.cpp)           the tile's two products on AMX, where the CPU has it
///   rates (prefill_rates.avx512.cpp)  bf16 dot vs fp32 FMA, measured once per process
///   run   (prefill_run.cpp)           packing on all threads, then a hook for the item loop
///
/// Three instruction sets for the same tiles: `vdpbf16ps` or AMX's `tdpbf16ps` on bf16 tiles
/// (bf16 q, with a bf16 or fp8 cache: both widen to bf16 exactly) and fp32 FMA on tiles widened
/// to fp32 (every other dtype, and CPUs without AMX where the bf16 dot runs slower than fp32 FMA).
#include <cstdint>
#include <vector>

#include "backends/cpu_flash/kernel_args.hpp"

namespace attn::cpu_flash {

struct Plan;

namespace prefill {

/// Keys per packed tile: the Q·Kᵀ micro-kernel keeps 4 vectors of 16 keys per row in registers.
constexpr int kTileKeys = 64;
/// Packed K/V one sequence may take (all its KV heads): 512 MiB is 128k tokens of 8 bf16
/// KV heads of 128.
constexpr int64_t kMaxSeqPackBytes = int64_t(512) << 20;
/// Longest row a packing step widens (head sizes up to 256).
constexpr int kMaxPackDims = 256;
/// Each packed V tile ends in this many bytes whose first says whether the tile holds a NaN or
/// an infinity: only then do partly masked tiles need P·V to skip masked keys (0·NaN = NaN).
constexpr int64_t kVFlagBytes = 64;

/// Which items the prefill path takes (env ATTN_CPU_PREFILL=auto|off|all; `all` also routes
/// small tiles, which the tests use to cover every row count).
enum class Route : uint8_t { auto_, off, all };
Route route_from_env();

/// The packed K/V of one call. Tile t of group (seq, kv_head) holds keys [64·t, 64·t + 64);
/// keys at or past the sequence's length are zeros, never cache contents.
struct PackLayout {
  bool bf16 = false;         // tiles hold bf16 (vdpbf16ps layout) or fp32
  bool amx = false;          // bf16 tiles whose products run on AMX (head size a multiple of 32)
  /// bf16 tiles of a per-token-head cache: the tiles hold the codes (exact in bf16), and each K
  /// tile is followed by its 64 keys' K scales (fp32), each V tile's values by their V scales; the
  /// tile kernel applies them to the scores and to P. (fp32 tiles hold code × scale instead.)
  bool token = false;
  int64_t k_scales_offset = 0, v_scales_offset = 0;  // bytes into a K tile / a V tile
  /// bf16 K tiles of values bf16 does not hold (turboquant's rotated-back keys): each key as a bf16
  /// hi half and the bf16 of its remainder (d more tile dims), q repeated over both: the scores
  /// keep ~16 bits of each key, as fp32 tiles would, on the bf16 (AMX) products.
  bool k_split = false;
  int head_size = 0;         // the K tiles' dims: d (2·d when k_split); even when bf16, so K pairs never straddle the row
  int dv_pad = 0;            // V dims rounded up to 16 (one vector), padding zeros
  int64_t k_tile_bytes = 0, v_tile_bytes = 0;
  struct Group {
    int64_t offset = -1;     // bytes into the buffer; -1 = not packed
    int32_t tile0 = 0, tiles = 0;
  };
  std::vector<Group> groups;  // [num_seqs * num_kv_heads]
  struct Job {
    int32_t seq, kv_head, tile;
  };
  std::vector<Job> jobs;      // one per tile, the parallel packing loop
  int64_t bytes = 0;
  int min_rows = 17;          // items with at least this many rows (and not split) take the path

  const Group& group(int seq, int kv_head, int num_kv_heads) const { return groups[std::size_t(seq) * num_kv_heads + kv_head]; }
};

/// Decides the path for this call and lays out the packed buffer (bytes = 0: path not taken).
/// `bf16_dot` says the chosen ISA runs bf16 dot products, `amx` that it runs them on AMX tiles.
PackLayout plan_pack(const KernelArgs& a, const Plan& plan, bool bf16_dot, bool amx, Route route);
/// True when `it` runs on the prefill kernel under `layout`.
bool takes_prefill(const PackLayout& layout, const KernelArgs& a, const WorkItem& it);

#if defined(__x86_64__) || defined(_M_X64)
/// Packs one tile (a job of layout.jobs) into `buf` (64-byte aligned).
void pack_tile_avx512(const KernelArgs& a, const PackLayout& layout, const PackLayout::Job& job, char* buf);
/// Runs one item on the packed tiles.
void run_item_avx512(const KernelArgs& a, const PackLayout& layout, const WorkItem& it, const char* buf);
/// Grows the calling thread's tile scratch to what an item of up to `rows` rows needs.
void reserve_tile_scratch_avx512(const KernelArgs& a, const PackLayout& layout, int rows);
/// AMX products (prefill_amx.cpp; only on CPUs the amx build runs on). amx_begin loads the
/// calling thread's tile configuration, amx_end releases it.
void amx_begin();
void amx_end();
/// S[16][64] (row stride 64) = Q[16][d] (bf16, row stride d; d a multiple of 32) · Kᵀ of a packed
/// bf16 K tile.
void amx_scores(const uint16_t* q, int d, const char* ktile, float* s);
/// O[16][dvp] (row stride dvp) += P[16][64] (bf16, row stride 64) · a packed bf16 V tile.
void amx_pv(const uint16_t* p, const char* vtile, int dvp, float* o);
/// The same for 32 rows (two 16-row groups) at once: each K / V tile loaded serves both groups,
/// half the tile traffic per row of the one-group forms. amx_pv_pair: dvp a multiple of 32 (the
/// amx build takes head sizes of whole tile rows, and V's is K's).
void amx_scores_pair(const uint16_t* q, int d, const char* ktile, float* s);
void amx_pv_pair(const uint16_t* p, const char* vtile, int dvp, float* o);
/// Whether vdpbf16ps outruns fp32 FMA on this CPU, per FLOP (measured once, < 2 ms).
bool bf16_dot_beats_fma();
/// The measured rates behind that choice (GFLOP/s on one thread), for reports.
struct DotRates {
  double bf16_dot = 0, fp32_fma = 0;
};
DotRates measure_dot_rates(int reps);
#endif

/// Stage switches for measurement only (0 = everything); see prefill_tile.avx512.cpp.
/// kTileByTile: every item on the tile-by-tile loop, none on the short-range one.
enum Stage : unsigned { kSkipQk = 1, kSkipSoftmax = 2, kSkipPv = 4, kPackOnly = 8, kTileByTile = 16 };
void set_stage_mask_for_measurement(unsigned mask);
unsigned stage_mask_for_measurement();

}  // namespace prefill
}  // namespace attn::cpu_flash
