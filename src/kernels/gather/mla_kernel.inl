// Attend kernel body (MLA latent entries, or separate K/V rows for block-sparse), included by one translation unit per ISA. The including file defines,
// inside the namespace it opens, the three primitives the body needs:
//   void convert_row(DType dtype, const uint8_t* src, float* dst, int n, float scale);  // dst = src × scale
//   void dot4(const float* q, const float* k0, const float* k1, const float* k2, const float* k3,
//             int n, float* out4);             // out4[j] = q · kj
//   void axpy4(float* acc, const float* p4, const float* k0, const float* k1, const float* k2,
//              const float* k3, int n);         // acc += Σ_j p4[j] · kj
// so the chunking and the online softmax below exist once and the inner loops per ISA.

inline const uint8_t* entry_ptr(const PagedKV& kv, int64_t slot, int64_t offset) {
  const int64_t block = slot / kv.block_size, off = slot % kv.block_size;
  return static_cast<const uint8_t*>(kv.base) +
         (block * kv.block_stride + off * kv.token_stride + offset) * int64_t(dtype_size(kv.dtype));
}

// One cache entry as a.width floats: a plain row × kv_scale, or an fp8_ds_mla entry dequantized
// tile by tile with its own scales (the rope part is bf16).
inline void convert_entry(const AttendArgs& a, const uint8_t* e, float* dst) {
  if (!a.kv->ds_mla) {
    convert_row(a.kv->dtype, e, dst, a.width, a.kv_scale);
    return;
  }
  for (int t = 0; t < ds_mla::kTiles; ++t)
    convert_row(DType::fp8_e4m3, e + t * ds_mla::kTile, dst + t * ds_mla::kTile, ds_mla::kTile, ds_mla::tile_scale(e, t));
  convert_row(DType::bfloat16, e + ds_mla::kRopeOffset, dst + ds_mla::kRank, ds_mla::kRope, 1.0f);
}

inline void attend_impl(const AttendArgs& a) {
  // Per-thread scratch: the converted chunk. Reused across calls so the hot path allocates nothing.
  thread_local std::vector<float> chunk_buf, v_buf;
  if (chunk_buf.size() < size_t(kChunk) * a.width) chunk_buf.resize(size_t(kChunk) * a.width);
  float* kbuf = chunk_buf.data();
  const bool separate_v = a.v_offset >= 0;
  if (separate_v && v_buf.size() < size_t(kChunk) * a.rank) v_buf.resize(size_t(kChunk) * a.rank);
  // V rows: the head of each K entry (MLA) or their own converted rows.
  float* vbase = separate_v ? v_buf.data() : kbuf;
  const int vstride = separate_v ? a.rank : a.width;
  float s[kChunk];

  int max_limit = 0;
  for (int r = 0; r < a.rows; ++r) max_limit = std::max(max_limit, std::min(a.row_limit[r], a.num_keys));

  for (int c0 = 0; c0 < max_limit; c0 += kChunk) {
    const int n = std::min(kChunk, max_limit - c0);
    // One cache read per entry for the whole row group (all heads of the token(s)).
    for (int j = 0; j < n; ++j) {
      convert_entry(a, entry_ptr(*a.kv, a.slots[c0 + j], a.k_offset), kbuf + size_t(j) * a.width);
      if (separate_v)
        convert_row(a.kv->dtype, entry_ptr(*a.kv, a.slots[c0 + j], a.v_offset), vbase + size_t(j) * vstride, a.rank,
                    a.v_scale);
    }
    for (int r = 0; r < a.rows; ++r) {
      const int nr = std::min(n, std::min(a.row_limit[r], a.num_keys) - c0);
      if (nr <= 0) continue;
      const float* q = a.q + size_t(r) * a.width;
      // Scores, four entries per pass so q is loaded once for four dot products.
      int j = 0;
      for (; j + 4 <= nr; j += 4) {
        const float* k = kbuf + size_t(j) * a.width;
        dot4(q, k, k + a.width, k + 2 * a.width, k + 3 * a.width, a.width, s + j);
      }
      for (; j < nr; ++j) {
        const float* k = kbuf + size_t(j) * a.width;
        float t[4];
        dot4(q, k, k, k, k, a.width, t);
        s[j] = t[0];
      }
      float mx = a.m[r];
      for (int jj = 0; jj < nr; ++jj) mx = std::max(mx, s[jj]);
      // Guards the all-(-inf) case (cannot happen for finite inputs, but NaN-free output matters).
      const float alpha = a.m[r] == -INFINITY ? 0.0f : std::exp2(a.m[r] - mx);
      float sum = 0.0f;
      for (int jj = 0; jj < nr; ++jj) {
        s[jj] = std::exp2(s[jj] - mx);
        sum += s[jj];
      }
      float* acc = a.acc + size_t(r) * a.rank;
      if (alpha != 1.0f) {
        for (int d = 0; d < a.rank; ++d) acc[d] *= alpha;
      }
      a.l[r] = a.l[r] * alpha + sum;
      a.m[r] = mx;
      // Output: the latent part (first `rank` values) of each entry, weighted.
      j = 0;
      for (; j + 4 <= nr; j += 4) {
        const float* v = vbase + size_t(j) * vstride;
        axpy4(acc, s + j, v, v + vstride, v + 2 * vstride, v + 3 * vstride, a.rank);
      }
      for (; j < nr; ++j) {
        const float p4[4] = {s[j], 0.0f, 0.0f, 0.0f};
        const float* v = vbase + size_t(j) * vstride;
        axpy4(acc, p4, v, v, v, v, a.rank);
      }
    }
  }
}
