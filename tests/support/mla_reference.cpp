#include "support/mla_reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

namespace attn::test {

std::string MlaCaseSpec::describe() const {
  std::ostringstream os;
  os << backend << " H=" << num_heads << " rank=" << rank << " rope=" << rope << " dtype=" << to_string(dtype)
     << " kv=" << to_string(kv_cache_dtype) << " bs=" << block_size << " topk=" << topk << " alias=" << alias_prefix
     << " seqs=[";
  for (const auto& s : seqs) os << "(" << s.context_len << "+" << s.query_len << ")";
  os << "] seed=" << seed;
  return os.str();
}

std::vector<double> tensor_values(const Buffer& b) {
  std::vector<double> v(size_t(b.view().numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = load_as_float(b.data(), b.dtype(), int64_t(i));
  return v;
}

CompareResult compare_values(const std::vector<double>& got, const std::vector<double>& ref, DType io, DType kv_storage) {
  return compare_values(got, ref, tolerance(io, kv_storage, ref));
}

CompareResult compare_values(const std::vector<double>& got, const std::vector<double>& ref, Tolerance tol) {
  CompareResult r;
  if (got.size() != ref.size()) return {false, 0, 0, "size mismatch"};
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::abs(got[i] - ref[i]);
    if (!(e <= tol.atol + tol.rtol * std::abs(ref[i]))) {
      if (r.ok) {
        std::ostringstream os;
        os << "element " << i << ": got " << got[i] << ", expected " << ref[i];
        r.message = os.str();
      }
      r.ok = false;
    }
    if (std::isnan(got[i])) r.max_abs_err = std::numeric_limits<double>::infinity();
    else r.max_abs_err = std::max(r.max_abs_err, e);
  }
  return r;
}

MlaCase make_mla_case(const MlaCaseSpec& spec) {
  MlaCase c;
  c.spec = spec;
  std::mt19937_64 rng(spec.seed);
  std::uniform_real_distribution<double> uni(-1.0, 1.0);
  const int H = spec.num_heads, R = spec.rank, P = spec.rope, N = spec.nope, V = spec.v_dim, W = R + P;

  LayerConfig& cfg = c.params.config;
  cfg.num_heads = H;
  cfg.num_kv_heads = 1;
  cfg.head_size = W;
  cfg.head_size_v = R;
  cfg.dtype = spec.dtype;
  cfg.kv_cache_dtype = spec.kv_cache_dtype;
  cfg.block_size = spec.block_size;
  cfg.use_mla = true;
  cfg.kv_lora_rank = R;
  cfg.qk_rope_head_dim = P;
  cfg.qk_nope_head_dim = N;
  cfg.v_head_dim = V;
  cfg.use_sparse = spec.topk > 0;
  cfg.index_topk = spec.topk;
  c.params.scale = float(1.0 / std::sqrt(double(N + P)));
  c.params.num_threads = spec.num_threads;
  auto desc = Registry::instance().find(spec.backend);
  if (!desc) throw Error("make_mla_case: unknown backend " + spec.backend);
  c.impl = desc->create(c.params);

  // Block tables over a permuted pool with spare (poisoned) blocks; optional shared prefix.
  const int bs = spec.block_size;
  const int S = int(spec.seqs.size());
  std::vector<int> len(S), nshared(S, 0);
  for (int s = 0; s < S; ++s) len[s] = spec.seqs[s].context_len + spec.seqs[s].query_len;
  for (int s = 1; s < S && spec.alias_prefix; ++s)
    nshared[s] = std::min(spec.seqs[0].context_len, spec.seqs[s].context_len) / bs;
  int total_blocks = 3;
  for (int s = 0; s < S; ++s) total_blocks += (len[s] + bs - 1) / bs - nshared[s];
  std::vector<int32_t> pool(total_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  size_t next = 0;
  std::vector<SequenceSpec> write_seqs(S), step_seqs(S);
  for (int s = 0; s < S; ++s) {
    std::vector<int32_t> ids;
    for (int b = 0; b < (len[s] + bs - 1) / bs; ++b)
      ids.push_back(b < nshared[s] ? write_seqs[0].block_ids[size_t(b)] : pool[next++]);
    write_seqs[s] = {0, len[s], ids};
    step_seqs[s] = {spec.seqs[s].context_len, spec.seqs[s].query_len, ids};
  }
  c.cache = std::make_unique<KVCache>(desc->cache_spec(cfg, total_blocks, bs));
  c.cache->fill(std::numeric_limits<float>::quiet_NaN());
  if (is_quantized(spec.kv_cache_dtype)) c.cache->set_scales({spec.kv_scale}, {spec.kv_scale});

  // Latent entries of every position, written once (aliased positions only by sequence 0).
  BatchMetadata wmd = BatchMetadata::build(write_seqs, bs, total_blocks);
  Buffer k(DType::float32, {wmd.num_tokens, 1, W});
  float* kp = static_cast<float*>(k.data());
  for (int64_t i = 0; i < int64_t(wmd.num_tokens) * W; ++i) kp[i] = float(uni(rng));
  if (spec.shape_entry)
    for (int t = 0; t < wmd.num_tokens; ++t) spec.shape_entry(t, kp + size_t(t) * W);
  for (int s = 1; s < S; ++s) {
    for (int p = 0; p < nshared[s] * bs; ++p) {
      const int t = wmd.query_start_loc[s] + p;
      std::copy_n(kp + size_t(wmd.query_start_loc[0] + p) * W, W, kp + size_t(t) * W);
      wmd.slot_mapping[size_t(t)] = -1;
    }
  }
  c.impl->write_kv(k.view(), k.view(), *c.cache, wmd);
  c.md = BatchMetadata::build(step_seqs, bs, total_blocks);

  // What the cache holds, dequantized: the oracle sees exactly the kernel's inputs.
  const PagedKV kv = c.cache->view();
  c.latent.resize(S);
  for (int s = 0; s < S; ++s) {
    c.latent[s].resize(size_t(len[s]) * W);
    for (int p = 0; p < len[s]; ++p) {
      const int64_t slot = int64_t(c.md.blocks(s)[p / bs]) * bs + p % bs;
      const int64_t e = (slot / bs) * kv.block_stride + (slot % bs) * kv.token_stride;
      std::vector<float> entry(W);
      if (kv.ds_mla) {
        ds_mla::dequantize_entry(static_cast<const uint8_t*>(kv.base) + e, entry.data());
      } else {
        for (int d = 0; d < W; ++d) entry[size_t(d)] = load_as_float(kv.base, kv.dtype, e + d) * kv.k_scales[0];
      }
      std::copy(entry.begin(), entry.end(), c.latent[s].begin() + ptrdiff_t(p) * W);
    }
  }

  // Un-absorbed query and projections; absorbed q_lat[h] = W_UK[h] · q_nope[h].
  const int T = c.md.num_tokens;
  const double wscale = 1.0 / std::sqrt(double(R));
  c.w_uk.resize(size_t(H) * R * N);
  c.w_uv.resize(size_t(H) * R * V);
  for (auto& x : c.w_uk) x = uni(rng) * wscale * 4;
  for (auto& x : c.w_uv) x = uni(rng) * wscale;
  c.q_nope.resize(size_t(T) * H * N);
  c.q_pe.resize(size_t(T) * H * P);
  for (auto& x : c.q_nope) x = uni(rng);
  for (auto& x : c.q_pe) x = uni(rng);
  c.q = Buffer(spec.dtype, {T, H, W});
  c.out = Buffer(spec.dtype, {T, H, R});
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      const int64_t row = (int64_t(t) * H + h) * W;
      for (int r = 0; r < R; ++r) {
        double a = 0;
        for (int n = 0; n < N; ++n) a += c.w_uk[(size_t(h) * R + r) * N + n] * c.q_nope[(size_t(t) * H + h) * N + n];
        store_from_float(c.q.data(), spec.dtype, row + r, float(a));
      }
      for (int p = 0; p < P; ++p)
        store_from_float(c.q.data(), spec.dtype, row + R + p, float(c.q_pe[(size_t(t) * H + h) * P + p]));
    }
  }

  // Top-k lists: random distinct positions of the whole sequence (future ones included, which
  // must be skipped), padded with -1 at random places.
  if (spec.topk > 0) {
    c.topk.assign(size_t(T) * spec.topk, -1);
    for (int s = 0; s < S; ++s) {
      for (int i = 0; i < c.md.query_len(s); ++i) {
        const int t = c.md.query_start_loc[s] + i;
        std::vector<int32_t> all(len[s]);
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng);
        const int n = std::min<int>(len[s], spec.topk - int(rng() % (spec.topk / 4 + 1)));
        std::vector<int32_t> row(all.begin(), all.begin() + n);
        row.resize(spec.topk, -1);
        std::shuffle(row.begin(), row.end(), rng);
        std::copy(row.begin(), row.end(), c.topk.begin() + size_t(t) * spec.topk);
      }
    }
  }
  return c;
}

void run_mla_forward(MlaCase& c) {
  const int64_t n = c.out.view().numel();
  for (int64_t i = 0; i < n; ++i) store_from_float(c.out.data(), c.out.dtype(), i, std::numeric_limits<float>::quiet_NaN());
  ForwardArgs args;
  args.q = c.q.view(), args.out = c.out.view(), args.cache = c.cache.get();
  if (c.spec.topk > 0) args.topk_indices = TensorView::contiguous(c.topk.data(), DType::int32, {c.md.num_tokens, c.spec.topk});
  c.impl->forward(c.md, args);
}

namespace {
// The keys query token t (sequence s, position pos) attends: all causal positions, or its
// listed ones (each listing counts) that are not in the future.
std::vector<int> attended(const MlaCase& c, int s, int t, int pos) {
  std::vector<int> keys;
  if (c.spec.topk == 0) {
    for (int p = 0; p <= pos; ++p) keys.push_back(p);
    return keys;
  }
  for (int k = 0; k < c.spec.topk; ++k) {
    const int p = c.topk[size_t(t) * c.spec.topk + k];
    if (p >= 0 && p <= pos) keys.push_back(p);
  }
  return keys;
}

// softmax(logits) · rows, rows given by a callback; empty → zeros.
template <typename RowFn>
void softmax_combine(const std::vector<double>& logits, int width, RowFn row, double* out) {
  std::fill(out, out + width, 0.0);
  if (logits.empty()) return;
  const double m = *std::max_element(logits.begin(), logits.end());
  double denom = 0;
  for (size_t j = 0; j < logits.size(); ++j) {
    const double p = std::exp(logits[j] - m);
    denom += p;
    const double* r = row(j);
    for (int x = 0; x < width; ++x) out[x] += p * r[x];
  }
  for (int x = 0; x < width; ++x) out[x] /= denom;
}
}  // namespace

std::vector<double> mla_absorbed_reference(const MlaCase& c) {
  const int H = c.spec.num_heads, R = c.spec.rank, W = R + c.spec.rope;
  const double scale = c.params.scale;
  std::vector<double> out(size_t(c.md.num_tokens) * H * R);
  std::vector<double> q(W);
  for (int s = 0; s < c.md.num_seqs; ++s) {
    for (int i = 0; i < c.md.query_len(s); ++i) {
      const int t = c.md.query_start_loc[s] + i, pos = c.md.context_len(s) + i;
      const std::vector<int> keys = attended(c, s, t, pos);
      for (int h = 0; h < H; ++h) {
        for (int d = 0; d < W; ++d) q[d] = load_as_float(c.q.data(), c.q.dtype(), (int64_t(t) * H + h) * W + d);
        std::vector<double> logits;
        for (int p : keys) {
          const double* e = c.latent[s].data() + size_t(p) * W;
          double dot = 0;
          for (int d = 0; d < W; ++d) dot += q[d] * e[d];
          logits.push_back(dot * scale);
        }
        softmax_combine(logits, R, [&](size_t j) { return c.latent[s].data() + size_t(keys[j]) * W; },
                        out.data() + (size_t(t) * H + h) * R);
      }
    }
  }
  return out;
}

std::vector<double> mla_explicit_reference(const MlaCase& c) {
  const int H = c.spec.num_heads, R = c.spec.rank, P = c.spec.rope, N = c.spec.nope, V = c.spec.v_dim, W = R + P;
  const double scale = c.params.scale;
  std::vector<double> out(size_t(c.md.num_tokens) * H * V);
  for (int s = 0; s < c.md.num_seqs; ++s) {
    const int L = c.md.seq_lens[s];
    for (int h = 0; h < H; ++h) {
      // Up-projected per-head K (nope part) and V of every position.
      std::vector<double> kn(size_t(L) * N, 0.0), vv(size_t(L) * V, 0.0);
      for (int p = 0; p < L; ++p) {
        const double* e = c.latent[s].data() + size_t(p) * W;
        for (int r = 0; r < R; ++r) {
          for (int n = 0; n < N; ++n) kn[size_t(p) * N + n] += e[r] * c.w_uk[(size_t(h) * R + r) * N + n];
          for (int n = 0; n < V; ++n) vv[size_t(p) * V + n] += e[r] * c.w_uv[(size_t(h) * R + r) * V + n];
        }
      }
      for (int i = 0; i < c.md.query_len(s); ++i) {
        const int t = c.md.query_start_loc[s] + i, pos = c.md.context_len(s) + i;
        const std::vector<int> keys = attended(c, s, t, pos);
        const double* qn = c.q_nope.data() + (size_t(t) * H + h) * N;
        const double* qp = c.q_pe.data() + (size_t(t) * H + h) * P;
        std::vector<double> logits;
        for (int p : keys) {
          double dot = 0;
          for (int n = 0; n < N; ++n) dot += qn[n] * kn[size_t(p) * N + n];
          for (int x = 0; x < P; ++x) dot += qp[x] * c.latent[s][size_t(p) * W + R + x];
          logits.push_back(dot * scale);
        }
        softmax_combine(logits, V, [&](size_t j) { return vv.data() + size_t(keys[j]) * V; },
                        out.data() + (size_t(t) * H + h) * V);
      }
    }
  }
  return out;
}

std::vector<double> project_latent(const MlaCase& c, const std::vector<double>& lat) {
  const int H = c.spec.num_heads, R = c.spec.rank, V = c.spec.v_dim;
  const int T = c.md.num_tokens;
  std::vector<double> out(size_t(T) * H * V, 0.0);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h)
      for (int r = 0; r < R; ++r) {
        const double x = lat[(size_t(t) * H + h) * R + r];
        for (int v = 0; v < V; ++v) out[(size_t(t) * H + h) * V + v] += x * c.w_uv[(size_t(h) * R + r) * V + v];
      }
  return out;
}

std::vector<double> blocksparse_reference(const Case& c) {
  const LayerConfig& cfg = c.params.config;
  const int H = cfg.num_heads, Hkv = cfg.num_kv_heads, D = cfg.head_size, Dv = cfg.effective_head_size_v();
  const int group = H / Hkv, B = cfg.bs_block_size;
  const double scale = c.params.scale > 0 ? c.params.scale : 1.0 / std::sqrt(double(D));
  std::vector<double> out(size_t(c.md.num_tokens) * H * Dv, 0.0);
  for (int s = 0; s < c.md.num_seqs; ++s) {
    const auto& K = c.dense_k[size_t(s)];
    const auto& Vv = c.dense_v[size_t(s)];
    for (int i = 0; i < c.md.query_len(s); ++i) {
      const int t = c.md.query_start_loc[s] + i, pos = c.md.context_len(s) + i, qb = pos / B;
      for (int h = 0; h < H; ++h) {
        const int kh = h / group;
        std::vector<double> logits;
        std::vector<int> keys;
        for (int p = 0; p <= pos; ++p) {
          const int kb = p / B;
          if (!(qb - kb < cfg.bs_local_blocks || (kb + h * cfg.bs_head_sliding_step + 1) % cfg.bs_vert_stride == 0)) continue;
          double dot = 0;
          for (int x = 0; x < D; ++x)
            dot += double(load_as_float(c.q.data(), c.q.dtype(), (int64_t(t) * H + h) * D + x)) *
                   K[(size_t(p) * Hkv + kh) * D + x];
          logits.push_back(dot * scale);
          keys.push_back(p);
        }
        softmax_combine(logits, Dv, [&](size_t j) { return Vv.data() + (size_t(keys[j]) * Hkv + kh) * Dv; },
                        out.data() + (size_t(t) * H + h) * Dv);
      }
    }
  }
  return out;
}

}  // namespace attn::test
