// Prefill path, plan phase: which items take it and where each (sequence, KV head)'s packed
// tiles go. Portable code; the ISA files only fill and read the buffer laid out here.
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "attn/error.hpp"
#include "backends/cpu_flash/decode.hpp"
#include "backends/cpu_flash/plan.hpp"
#include "backends/cpu_flash/prefill.hpp"

namespace attn::cpu_flash::prefill {

Route route_from_env() {
  const char* env = std::getenv("ATTN_CPU_PREFILL");
  if (!env || !*env || std::string_view(env) == "auto") return Route::auto_;
  if (std::string_view(env) == "off") return Route::off;
  if (std::string_view(env) == "all") return Route::all;
  throw Error(std::string("ATTN_CPU_PREFILL=") + env + " invalid: expected one of auto, off, all");
}

bool takes_prefill(const PackLayout& layout, const KernelArgs& a, const WorkItem& it) {
  if (layout.bytes == 0 || it.mm || it.partial >= 0 || item_rows(it, a.group) < layout.min_rows) return false;
  return layout.group(it.seq, it.kv_head, a.num_kv_heads).offset >= 0;
}

PackLayout plan_pack(const KernelArgs& a, const Plan& plan, bool bf16_dot, bool amx, Route route) {
  PackLayout L;
  // ALiBi stays on the general kernel (a per-row, per-key bias in the epilogue is not worth a
  // variant for the few ALiBi models).
  if (route == Route::off || a.alibi_slopes) return L;
  // Items of up to kDecodeMaxRows rows belong to the decode kernel, which streams the cache
  // without packing it.
  L.min_rows = route == Route::all ? 1 : kDecodeMaxRows + 1;
  // bf16 dot products are exact only for bf16 q, and the tiles are exact for caches whose
  // values bf16 holds exactly (bf16, both fp8 formats); fp16 / fp32 caches widen to fp32. The
  // bf16 K tiles hold dimension pairs, so an odd head size widens to fp32 too. Per-token-head
  // caches (int8 / e4m3 codes) keep their codes in bf16 tiles and their scales beside them; int4
  // ones (kv_type bf16) their codes − zero point, q rotated by the tile kernel. turboquant slots
  // (kv_type f32) unpack to fp32 rows rounded into bf16 tiles (keys rotated back): V not exact, but
  // what a bf16 engine's prefill over the dequantized cache
  // computes (vLLM's attends to it in the model dtype), and on AMX; the 3 / 4-bit keys split into
  // bf16 hi and lo halves (k_split), so scores stay within the bf16 tolerance at large logits.
  L.bf16 = bf16_dot && a.q_dtype == DType::bfloat16 && a.head_size % 2 == 0 &&
           (a.kv_type == KvType::bf16 || a.kv_type == KvType::e4m3 || a.kv_type == KvType::e5m2 || a.kv_type == KvType::i8 ||
            a.turboquant);
  L.token = L.bf16 && a.token_scales;
  // AMX tiles take q 32 dimensions (one 64-byte tile row) at a time.
  L.amx = amx && L.bf16 && a.head_size % 32 == 0;
  L.k_split = L.bf16 && a.turboquant && !a.kv.tq.key_fp8();  // e4m3 keys are exact in bf16
  L.head_size = a.head_size * (L.k_split ? 2 : 1);
  L.dv_pad = (a.head_size_v + 15) / 16 * 16;
  const int64_t elem = L.bf16 ? 2 : 4;
  L.k_tile_bytes = int64_t(kTileKeys) * L.head_size * elem;
  L.v_tile_bytes = int64_t(kTileKeys) * L.dv_pad * elem + kVFlagBytes;
  if (L.token) {  // 64 fp32 scales after the K codes and after the V codes (64-byte aligned: d, dvp even / x16)
    L.k_scales_offset = L.k_tile_bytes, L.k_tile_bytes += kTileKeys * 4;
    L.v_scales_offset = L.v_tile_bytes - kVFlagBytes, L.v_tile_bytes += kTileKeys * 4;
  }

  const int num_seqs = [&] {
    int n = 0;
    for (const WorkItem& it : plan.items) n = std::max(n, it.seq + 1);
    return n;
  }();
  // The key range each sequence's prefill items need (the same for all its KV heads).
  std::vector<int32_t> lo(std::size_t(num_seqs), INT32_MAX), hi(std::size_t(num_seqs), 0);
  for (const WorkItem& it : plan.items) {
    if (it.mm || it.partial >= 0 || item_rows(it, a.group) < L.min_rows || it.kv_end <= it.kv_begin) continue;
    lo[std::size_t(it.seq)] = std::min(lo[std::size_t(it.seq)], it.kv_begin);
    hi[std::size_t(it.seq)] = std::max(hi[std::size_t(it.seq)], it.kv_end);
  }
  L.groups.assign(std::size_t(num_seqs) * a.num_kv_heads, {});
  int64_t off = 0;
  for (int s = 0; s < num_seqs; ++s) {
    if (hi[std::size_t(s)] <= lo[std::size_t(s)]) continue;
    const int32_t t0 = lo[std::size_t(s)] / kTileKeys, t1 = (hi[std::size_t(s)] + kTileKeys - 1) / kTileKeys;
    // A short chunk over a very long context would pack far more than it computes on; such a
    // sequence stays on the general kernel. Decided per sequence, so batch invariance holds.
    if (int64_t(t1 - t0) * (L.k_tile_bytes + L.v_tile_bytes) * a.num_kv_heads > kMaxSeqPackBytes) continue;
    for (int h = 0; h < a.num_kv_heads; ++h) {
      PackLayout::Group& g = L.groups[std::size_t(s) * a.num_kv_heads + h];
      g.offset = off, g.tile0 = t0, g.tiles = t1 - t0;
      off += int64_t(g.tiles) * (L.k_tile_bytes + L.v_tile_bytes);
      for (int32_t t = t0; t < t1; ++t) L.jobs.push_back({s, h, t});
    }
  }
  L.bytes = off;
  return L;
}

}  // namespace attn::cpu_flash::prefill
