#include "kernels/gather/mla_expanded.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "attn/error.hpp"
#include "cpu/threads.hpp"

namespace attn::mla {

namespace {
// Visible keys of each query token summed over a sequence (causal, bottom-right aligned).
double visible_pairs(const BatchMetadata& md, int s) {
  const double ql = md.query_len(s), ctx = md.context_len(s);
  return md.causal ? ql * ctx + ql * (ql + 1) / 2 : ql * md.seq_lens[s];
}
}  // namespace

double absorbed_flops(const MlaShape& shape, const BatchMetadata& md) {
  double f = 0;
  for (int s = 0; s < md.num_seqs; ++s) f += visible_pairs(md, s) * shape.num_heads * 2.0 * (shape.width() + shape.rank);
  return f;
}

double expanded_flops(const MlaShape& shape, int nope, int v_dim, const BatchMetadata& md) {
  double f = 0;
  for (int s = 0; s < md.num_seqs; ++s) {
    f += double(md.seq_lens[s]) * shape.num_heads * 2.0 * shape.rank * (nope + v_dim);  // up-projection
    f += visible_pairs(md, s) * shape.num_heads * 2.0 * (nope + shape.rope + v_dim);    // attention
  }
  return f;
}

void expanded_forward(const MlaShape& shape, const UpProjections& w, const TensorView& q, const KVCache& cache,
                      const BatchMetadata& md, const TensorView& out) {
  require(!w.empty(), "up_projections", "unset", "a layer created with mla_w_uk / mla_w_uv (LayerParams) for the expanded form");
  const int H = shape.num_heads, R = shape.rank, P = shape.rope, N = w.nope, V = w.v_dim, D = N + P;
  const int T = md.num_tokens;
  check_tensor(q, "q", 3, {DType::float32, DType::float16, DType::bfloat16}, {T, H, D});
  check_tensor(out, "out", 3, {DType::float32, DType::float16, DType::bfloat16}, {T, H, V});
  check_mla_cache(shape, cache, md);
  const int threads = cpu::team_size(shape.num_threads);
  const PagedKV kv = cache.view();
  const float kv_scale = kv.k_scales && !kv.ds_mla ? kv.k_scales[0] : 1.0f;
  const size_t kv_esz = dtype_size(kv.dtype), q_esz = dtype_size(q.dtype), o_esz = dtype_size(out.dtype);

  std::vector<float> lat, kexp, vexp;
  for (int s = 0; s < md.num_seqs; ++s) {
    const int L = md.seq_lens[s], ql = md.query_len(s), ctx = L - ql, q0 = md.query_start_loc[s];
    if (ql == 0) continue;
    // Dequantized latent entries [L][R + P].
    lat.resize(size_t(L) * (R + P));
    kexp.resize(size_t(H) * L * D);
    vexp.resize(size_t(H) * L * V);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = 0; t < L; ++t) {
      const int64_t slot = slot_of(md, s, t);
      const auto* e = static_cast<const uint8_t*>(kv.base) +
                      ((slot / kv.block_size) * kv.block_stride + (slot % kv.block_size) * kv.token_stride) * kv_esz;
      float* c = lat.data() + size_t(t) * (R + P);
      if (kv.ds_mla) {
        ds_mla::dequantize_entry(e, c);  // R + P = 576, checked with the cache
      } else {
        for (int d = 0; d < R + P; ++d) c[d] = load_as_float(e, kv.dtype, d) * kv_scale;
      }
      // Per-head up-projection of this entry: K_nope = c·W_UK[h], V = c·W_UV[h]; rope is shared.
      for (int h = 0; h < H; ++h) {
        float* k = kexp.data() + (size_t(h) * L + t) * D;
        float* v = vexp.data() + (size_t(h) * L + t) * V;
        std::fill(k, k + N, 0.0f);
        std::fill(v, v + V, 0.0f);
        const float* wk = w.w_uk.data() + size_t(h) * R * N;
        const float* wv = w.w_uv.data() + size_t(h) * R * V;
        for (int r = 0; r < R; ++r) {
          const float cr = c[r];
          for (int n = 0; n < N; ++n) k[n] += cr * wk[size_t(r) * N + n];
          for (int n = 0; n < V; ++n) v[n] += cr * wv[size_t(r) * V + n];
        }
        std::copy(c + R, c + R + P, k + N);
      }
    }
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) collapse(2)
    for (int h = 0; h < H; ++h) {
      for (int i = 0; i < ql; ++i) {
        thread_local std::vector<float> qv, sc, o;
        qv.resize(D);
        o.assign(V, 0.0f);
        const int t = q0 + i;
        const auto* qrow = static_cast<const uint8_t*>(q.data) + (t * q.strides[0] + h * q.strides[1]) * q_esz;
        for (int d = 0; d < D; ++d) qv[d] = read_elem(qrow, q.dtype, d) * shape.scale;
        const int nk = md.causal ? ctx + i + 1 : L;
        sc.resize(std::max(nk, 1));
        float mx = -INFINITY;
        for (int k = 0; k < nk; ++k) {
          const float* kr = kexp.data() + (size_t(h) * L + k) * D;
          float a = 0.0f;
          for (int d = 0; d < D; ++d) a += qv[d] * kr[d];
          sc[k] = a;
          mx = std::max(mx, a);
        }
        float sum = 0.0f;
        for (int k = 0; k < nk; ++k) {
          const float p = std::exp(sc[k] - mx);
          sum += p;
          const float* vr = vexp.data() + (size_t(h) * L + k) * V;
          for (int d = 0; d < V; ++d) o[d] += p * vr[d];
        }
        auto* orow = static_cast<uint8_t*>(out.data) + (t * out.strides[0] + h * out.strides[1]) * o_esz;
        write_row(orow, out.dtype, o.data(), V, sum == 0.0f ? 0.0f : 1.0f / sum);
      }
    }
  }
}

}  // namespace attn::mla
