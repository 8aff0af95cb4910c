// Prefill path, tile phase (the pipeline: prefill_tile.hpp): the loop over an item's key tiles
// on AVX-512, the AMX tiles handed to amx_key_tile, and the rows' normalization and store.
#define ATTN_CF_NS prefill_avx512
#include "backends/cpu_flash/prefill_tile.hpp"

namespace attn::cpu_flash::prefill {
namespace tile {

unsigned g_stage_mask = 0;

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

namespace {

/// Normalizes and writes the item's rows: the sink as one more logit in the denominator, 1/l,
/// the V scale; vectorized, since with short windows (gpt-oss: 128 keys) a scalar row store
/// costs a sizeable share of an item.
void store_rows(const KernelArgs& a, const Ctx& cx, int rows, int64_t tok0, int kv_head) {
  constexpr float kLn2 = 0.693147180559945309f;
  const int g = a.group, dv = a.head_size_v;
  const float vscale = a.kv.v_scales[kv_head] * (a.kv_type == KvType::e4m3 ? kE4m3Rebias : 1.0f);
  for (int r = 0; r < rows; ++r) {
    if (a.int4) int4_head::unrotate(cx.o + int64_t(r) * cx.dvp, dv);  // outputs over rotated V rows
    const int head = kv_head * g + r % g;
    const float l = _mm512_reduce_add_ps(_mm512_loadu_ps(cx.lsum + r * 16));
    const float m = cx.m2[r] * kLn2;  // natural-log units, like the sink logit
    float factor;
    if (a.sinks) {
      const float sink = a.sinks[head], mm = std::max(m, sink), w = std::exp(m - mm);
      factor = w / (l * w + std::exp(sink - mm));
    } else {
      factor = l == 0.0f ? 0.0f : 1.0f / l;  // fully masked row -> 0 (a NaN sum stays NaN)
    }
    const __m512 f = _mm512_set1_ps(factor * vscale);
    const int64_t base = (tok0 + r / g) * a.o_tok_stride + int64_t(head) * a.o_head_stride;
    const float* o = cx.o + int64_t(r) * cx.dvp;
    for (int x = 0; x < dv; x += 16) {
      const __mmask16 k = dv - x >= 16 ? __mmask16(0xffff) : __mmask16((1u << (dv - x)) - 1);
      const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(o + x), f);
      if (a.out_dtype == DType::float32)
        _mm512_mask_storeu_ps(static_cast<float*>(a.out) + base + x, k, v);
      else if (a.out_dtype == DType::bfloat16)
        _mm256_mask_storeu_epi16(static_cast<uint16_t*>(a.out) + base + x, k, (__m256i)_mm512_cvtneps_pbh(v));
      else
        _mm256_mask_storeu_epi16(static_cast<uint16_t*>(a.out) + base + x, k,
                                 _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
  }
}

using PvFn = void (*)(const Ctx&, int, const char*, int, int, int);

/// [bf16][cap][mask][NV − 1]
template <bool Bf16, bool Cap, bool Mask>
constexpr std::array<QkFn, 4> qk_row() {
  return {&qk_softmax<Bf16, 1, Mask, Cap>, &qk_softmax<Bf16, 2, Mask, Cap>, &qk_softmax<Bf16, 3, Mask, Cap>,
          &qk_softmax<Bf16, 4, Mask, Cap>};
}
template <bool Bf16>
constexpr std::array<PvFn, 4> pv_row() {
  return {&pv<Bf16, 1>, &pv<Bf16, 2>, &pv<Bf16, 3>, &pv<Bf16, 4>};
}

template <bool Bf16>
void run(const KernelArgs& a, const PackLayout& L, const WorkItem& it, const char* buf) {
  static constexpr std::array<std::array<std::array<QkFn, 4>, 2>, 2> kQk = {{
      {{qk_row<Bf16, false, false>(), qk_row<Bf16, false, true>()}},
      {{qk_row<Bf16, true, false>(), qk_row<Bf16, true, true>()}},
  }};
  static constexpr std::array<PvFn, 4> kPv = pv_row<Bf16>();

  const int g = a.group, d = a.head_size, dvp = L.dv_pad;
  const bool amx = Bf16 && L.amx;
  const int row_block = amx ? 16 : R;  // AMX tiles take 16 rows
  const int rows = item_rows(it, g), rp = (rows + row_block - 1) / row_block * row_block;
  const int s = it.seq, h = it.kv_head;
  Scratch& sc = scratch();
  sc.o.assign(std::size_t(rp) * dvp, 0.0f);
  sc.lsum.assign(std::size_t(rp) * 16, 0.0f);
  sc.m2.assign(std::size_t(rp), kMasked);
  sc.alpha.assign(std::size_t(rp), 1.0f);
  sc.lo.resize(std::size_t(rp)), sc.hi.resize(std::size_t(rp));
  // Real Q rows are overwritten below; only the padding rows need their zeros.
  if constexpr (Bf16) {
    sc.qb.resize(std::size_t(rp) * d), sc.pb.resize(std::size_t(rp) * kTileKeys);
    std::fill(sc.qb.begin() + std::ptrdiff_t(rows) * d, sc.qb.end(), uint16_t(0));
    if (amx) sc.s.resize(std::size_t(rp) * kTileKeys), sc.vclean.resize(std::size_t(kTileKeys) * dvp);
  } else {
    sc.qf.resize(std::size_t(rp) * d), sc.pf.resize(std::size_t(rp) * kTileKeys);
    std::fill(sc.qf.begin() + std::ptrdiff_t(rows) * d, sc.qf.end(), 0.0f);
  }

  const int64_t tok0 = a.query_start_loc[s] + it.q_begin;
  const int32_t seq_len = a.seq_lens[s];
  const int32_t first_pos = seq_len - (a.query_start_loc[s + 1] - a.query_start_loc[s]) + it.q_begin;
  for (int r = 0; r < rp; ++r) {
    // Padding rows repeat the last real row's range (their zero q gives finite scores, and
    // they never add masks of their own); they are never stored.
    const int32_t pos = first_pos + std::min(r, rows - 1) / g;
    sc.hi[std::size_t(r)] = a.causal ? std::min(pos, seq_len - 1) : seq_len - 1;
    sc.lo[std::size_t(r)] = a.window > 0 ? std::max(0, pos - a.window + 1) : 0;
    if (r >= rows) continue;
    const int64_t e = (tok0 + r / g) * a.q_tok_stride + int64_t(h * g + r % g) * a.q_head_stride;
    // int4 and turboquant's 3 / 4-bit keys live in a rotated space: q rotated like them (see
    // int4_head, turboquant::rotate), then as the tiles take it.
    if (a.int4 || (a.turboquant && !a.kv.tq.key_fp8())) {
      alignas(64) float qr[kMaxHeadSize];
      for (int x = 0; x < d; ++x) qr[x] = load_as_float(a.q, a.q_dtype, e + x);
      if (a.int4)
        int4_head::rotate_query(qr, d, a.q_dtype);
      else
        turboquant::rotate(qr, d);
      for (int x = 0; x < d; ++x) {
        if constexpr (Bf16)
          sc.qb[std::size_t(r) * d + x] = f32_to_bf16(qr[x]);
        else
          sc.qf[std::size_t(r) * d + x] = qr[x];
      }
    } else if constexpr (Bf16) {
      const uint16_t* src = static_cast<const uint16_t*>(a.q) + e;
      std::copy(src, src + d, sc.qb.data() + int64_t(r) * d);
    } else {
      for (int x = 0; x < d; ++x) sc.qf[std::size_t(r) * d + x] = load_as_float(a.q, a.q_dtype, e + x);
    }
  }

  Ctx cx;
  cx.qb = sc.qb.data(), cx.qf = sc.qf.data(), cx.d = d, cx.dvp = dvp;
  cx.pb = sc.pb.data(), cx.pf = sc.pf.data(), cx.o = sc.o.data(), cx.lsum = sc.lsum.data();
  cx.m2 = sc.m2.data(), cx.alpha = sc.alpha.data(), cx.lo = sc.lo.data(), cx.hi = sc.hi.data();
  const float kscale = a.scale * a.kv.k_scales[h] * (a.kv_type == KvType::e4m3 ? kE4m3Rebias : 1.0f) / (a.int4 ? float(d) : 1.0f);
  cx.c = kscale * kLog2e;
  const bool cap = a.soft_cap > 0;
  if (cap) cx.cap_in = 2.0f * kscale / a.soft_cap * kLog2e, cx.cap_out = a.soft_cap * kLog2e;

  const PackLayout::Group& grp = L.group(s, h, a.num_kv_heads);
  const int64_t tile_bytes = L.k_tile_bytes + L.v_tile_bytes;
  // The item's key range, tightened to what its rows can see.
  const int32_t kb = std::max(it.kv_begin, sc.lo[0]), ke = std::min(it.kv_end, sc.hi[std::size_t(rp - 1)] + 1);
  const int nvd = dvp / 16;
  if (amx) cx.s = sc.s.data(), amx_begin();
  for (int32_t t = kb / kTileKeys; t * kTileKeys < ke; ++t) {
    const int32_t key0 = t * kTileKeys;
    const char* kt = buf + grp.offset + int64_t(t - grp.tile0) * tile_bytes;
    const char* vt = kt + L.k_tile_bytes;
    if (L.token) cx.ks = reinterpret_cast<const float*>(kt + L.k_scales_offset), cx.vs = reinterpret_cast<const float*>(vt + L.v_scales_offset);
    if (amx) {
      amx_key_tile(a, L, cx, sc, rows, rp, kt, vt, key0);
      continue;
    }
    const int j0 = (std::max(kb, key0) - key0) / 16;
    const int j1 = (std::min(ke, key0 + kTileKeys) - key0 + 15) / 16;
    const int32_t first = key0 + j0 * 16, last = key0 + j1 * 16 - 1;
    for (int r0 = 0; r0 < rp; r0 += R) {
      // Rows grow in position, so the micro-tile's tightest bounds are its first row's last
      // key and its last row's first key.
      const bool mask = sc.hi[std::size_t(r0)] < last || sc.lo[std::size_t(r0 + R - 1)] > first;
      kQk[cap][mask][j1 - j0 - 1](cx, r0, kt, j0, key0);
    }
    const bool nonfinite_v = vt[L.v_tile_bytes - kVFlagBytes] != 0;
    for (int r0 = 0; r0 < rp; r0 += R) {
      if (nonfinite_v && (sc.hi[std::size_t(r0)] < last || sc.lo[std::size_t(r0 + R - 1)] > first)) {
        pv_guarded<Bf16>(cx, r0, vt, key0, j0 * 16, j1 * 16);
        continue;
      }
      for (int c0 = 0; c0 < nvd; c0 += 4) kPv[std::min(4, nvd - c0) - 1](cx, r0, vt, c0, j0 * 16, j1 * 16);
    }
  }

  if (amx) amx_end();
  store_rows(a, cx, rows, tok0, h);
}

}  // namespace
}  // namespace tile

void run_item_avx512(const KernelArgs& a, const PackLayout& layout, const WorkItem& it, const char* buf) {
  if (layout.bf16)
    tile::run<true>(a, layout, it, buf);
  else
    tile::run<false>(a, layout, it, buf);
}

void reserve_tile_scratch_avx512(const KernelArgs& a, const PackLayout& L, int rows) {
  // What run() sizes for an item of `rows` rows (R rows per micro-tile, 16 per AMX group).
  const int row_block = L.amx ? 16 : tile::R;
  const std::size_t rp = std::size_t((rows + row_block - 1) / row_block * row_block), d = std::size_t(a.head_size);
  tile::Scratch& sc = tile::scratch();
  sc.o.reserve(rp * std::size_t(L.dv_pad)), sc.lsum.reserve(rp * 16);
  sc.m2.reserve(rp), sc.alpha.reserve(rp), sc.lo.reserve(rp), sc.hi.reserve(rp);
  if (L.bf16)
    sc.qb.reserve(rp * d), sc.pb.reserve(rp * kTileKeys);
  if (L.amx) sc.s.reserve(rp * kTileKeys), sc.vclean.reserve(std::size_t(kTileKeys) * L.dv_pad);
  else
    sc.qf.reserve(rp * d), sc.pf.reserve(rp * kTileKeys);
}

void set_stage_mask_for_measurement(unsigned mask) { tile::g_stage_mask = mask; }
unsigned stage_mask_for_measurement() { return tile::g_stage_mask; }

}  // namespace attn::cpu_flash::prefill
