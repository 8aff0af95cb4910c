#include "test_support.hpp"
#include "testkit/harness.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <sstream>

namespace attn::test {

Tolerance tolerance(DType io, DType kv, const std::vector<double>& ref, double v_max) {
  double ref_max = 0;
  for (double r : ref) ref_max = std::max(ref_max, std::fabs(r));
  return tolerance_rule(io, kv).scaled(ref_max, v_max);
}

uint64_t fresh_seed() {
  if (const char* s = std::getenv("ATTN_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32);
}

std::string CaseSpec::describe() const {
  std::ostringstream os;
  os << "seed=" << seed << " (rerun with ATTN_TEST_SEED=" << seed << ") block_size=" << block_size << " seqs=[";
  for (std::size_t i = 0; i < seqs.size(); ++i) os << (i ? " " : "") << seqs[i].context_len << "+" << seqs[i].query_len;
  os << "]" << (layout ? " layout=" + std::string(to_string(*layout)) : std::string()) << " permute=" << permute_blocks << " alias=" << alias_prefix << " planted=" << plant_keys << " strided=" << int(strided) << " " << config.to_string();
  return os.str();
}

namespace {

// Rounds x to what dtype d can hold (through the library's scalar conversion).
double round_to(double x, DType d) {
  float tmp[1];
  uint8_t raw[4];
  (void)tmp;
  store_from_float(raw, d, 0, float(x));
  return load_as_float(raw, d, 0);
}

Buffer random_buffer(std::mt19937_64& rng, DType d, std::vector<int64_t> shape, float range) {
  Buffer b(d, std::move(shape));
  std::uniform_real_distribution<float> u(-range, range);
  const int64_t n = b.view().numel();
  for (int64_t i = 0; i < n; ++i) store_from_float(b.data(), d, i, u(rng));
  return b;
}

// Wide score range (CaseSpec::plant_keys). A planted key is c·range·dir[kv head] with c in
// [0.8, 1]; every query of the head group gets q_bias·range·dir added, so a planted key scores
// ~c·kPlantedScore for every query while the others stay around ±1.
constexpr double kPlantedScore = 12;

struct Planting {
  std::vector<float> dir;  // [num_kv_heads, head_size], entries ±1
  float q_bias = 0;
};

Planting make_planting(std::mt19937_64& rng, int Hkv, int D, double scale, float range) {
  Planting p;
  p.dir.resize(std::size_t(Hkv) * D);
  for (float& x : p.dir) x = (rng() & 1) ? 1.0f : -1.0f;
  // planted score ≈ scale·Σ_x (q_bias·range·dir_x)(range·dir_x) = scale·q_bias·range²·D
  p.q_bias = float(std::min(4.0, kPlantedScore / (scale * double(range) * range * D)));
  return p;
}

// One planted key in every 128 positions of [first, len), and the newest key half the time (it
// is the decode query's own key, which a wrong causal mask drops).
void plant_keys(std::mt19937_64& rng, const Planting& p, Buffer& k, int first, int len, int Hkv, int D, float range) {
  std::uniform_real_distribution<float> c(0.8f, 1.0f);
  for (int h = 0; h < Hkv; ++h) {
    std::vector<int> at;
    for (int j = 0; j < len; j += 128) at.push_back(j + int(rng() % uint64_t(std::min(128, len - j))));
    if (rng() & 1) at.push_back(len - 1);
    for (int t : at) {
      if (t < first) continue;  // a shared prefix position: sequence 0 owns it
      const float w = c(rng) * range;
      for (int x = 0; x < D; ++x)
        store_from_float(k.data(), k.dtype(), (int64_t(t) * Hkv + h) * D + x, w * p.dir[std::size_t(h) * D + x]);
    }
  }
}

}  // namespace

void unrotate_fp64(double* y, int n) {
  int4_head::hadamard(y, n);
  for (int x = 0; x < n; ++x) y[x] = y[x] * int4_head::rht_sign(x) / n;
}

KVCacheSpec byte_cache_spec(KVCacheDType k, KVLayout layout, int head) {
  KVCacheSpec s;
  s.num_blocks = 3, s.block_size = 16, s.num_kv_heads = 2, s.head_size = head;
  s.dtype = DType::int8;
  s.kv_cache_dtype = k;
  s.layout = layout;
  return s;
}

void int4_query_fp64(const void* q, DType io, int64_t offset, int n, double* dst) {
  std::vector<float> r(static_cast<std::size_t>(n));
  for (int x = 0; x < n; ++x) r[std::size_t(x)] = load_as_float(q, io, offset + x);
  int4_head::rotate(r.data(), n);  // the format's rounding done here, not by the library's rotate_query
  for (int x = 0; x < n; ++x) dst[x] = round_to(r[std::size_t(x)], io);
  unrotate_fp64(dst, n);
}


Case make_case(const CaseSpec& spec, const std::string& backend) {
  const LayerConfig& cfg = spec.config;
  if (cfg.use_mla) throw Error("make_case: MLA layers use the MLA oracle (tests/support/mla_reference)");
  auto desc = Registry::instance().find(backend);
  if (!desc) throw Error("make_case: unknown backend " + backend);
  Case c;
  c.spec = spec;
  c.backend = backend;
  std::mt19937_64 rng(spec.seed);
  const int bs = spec.block_size, H = cfg.num_heads, Hkv = cfg.num_kv_heads, D = cfg.head_size,
            Dv = cfg.effective_head_size_v();
  const DType io = cfg.dtype;

  c.params.config = cfg;
  c.params.scale = spec.scale;
  c.params.num_threads = spec.num_threads;
  if (cfg.has_sink) {
    // With planted keys the sink sits among their scores, so it visibly moves every output.
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    const float shift = spec.plant_keys ? float(0.8 * kPlantedScore) : 0.0f;
    for (int h = 0; h < H; ++h) c.params.sinks.push_back(shift + u(rng));
  }
  Planting planting;
  if (spec.plant_keys)
    planting = make_planting(rng, Hkv, D, spec.scale > 0 ? spec.scale : 1.0 / std::sqrt(double(D)), spec.value_range);
  c.impl = Registry::instance().create(backend, c.params);

  // Block tables: sequence 0 first; with alias_prefix, others reuse its full context blocks.
  const std::size_t S = spec.seqs.size();
  std::vector<int> lens(S), shared(S, 0);
  int total_blocks = spec.spare_blocks;
  for (std::size_t s = 0; s < S; ++s) {
    lens[s] = spec.seqs[s].context_len + spec.seqs[s].query_len;
    if (spec.alias_prefix && s > 0) shared[s] = std::min(spec.seqs[0].context_len, spec.seqs[s].context_len) / bs;
    total_blocks += (lens[s] + bs - 1) / bs - shared[s];
  }
  total_blocks = std::max(total_blocks, 1);
  std::vector<int32_t> pool(static_cast<std::size_t>(total_blocks));
  for (int i = 0; i < total_blocks; ++i) pool[std::size_t(i)] = i;
  if (spec.permute_blocks) std::shuffle(pool.begin(), pool.end(), rng);
  std::size_t next = 0;
  std::vector<std::vector<int32_t>> tables(S);
  for (std::size_t s = 0; s < S; ++s) {
    const int nb = (lens[s] + bs - 1) / bs;
    for (int b = 0; b < nb; ++b) tables[s].push_back(b < shared[s] ? tables[0][std::size_t(b)] : pool[next++]);
  }

  KVCacheSpec cs = desc->cache_spec(cfg, total_blocks, bs);
  cs.per_head_scales = spec.per_head_scales;
  if (spec.layout) cs.layout = *spec.layout;
  if (spec.strided == CaseSpec::Strided::none) {
    c.cache = std::make_unique<KVCache>(cs);
  } else {  // rows of D + Dv + 3 elements, blocks 5 elements apart beyond their rows: NaN between
    cs.layout = spec.strided == CaseSpec::Strided::head_major ? KVLayout::HND : KVLayout::NHD;
    const int64_t row = D + Dv + 3, block = int64_t(bs) * Hkv * row + 5;
    c.strided_memory = Buffer(cs.dtype, {int64_t(total_blocks), block});
    for (int64_t i = 0; i < int64_t(total_blocks) * block; ++i)
      store_from_float(c.strided_memory.data(), cs.dtype, i, std::numeric_limits<float>::quiet_NaN());
    StridedKV m;
    m.memory = m.k = c.strided_memory.data();
    m.bytes = c.strided_memory.bytes();
    m.block = block, m.v_offset = D;
    const bool head_major = spec.strided == CaseSpec::Strided::head_major;
    m.head = head_major ? int64_t(bs) * row : row;
    m.token = head_major ? row : int64_t(Hkv) * row;
    c.cache = std::make_unique<KVCache>(cs, m);
  }
  // Per-tensor / per-head fp8 scales; per-token-head caches (token) compute their own as written.
  const bool token = cs.token_scales();
  const bool fp8 = (cs.dtype == DType::fp8_e4m3 || cs.dtype == DType::fp8_e5m2) && !token;
  const bool nvfp4 = cs.nvfp4();  // block scales per 16 values under the per-tensor / per-head global scales
  if (fp8 || nvfp4) {
    const float base = spec.value_range / 100.0f;  // values land well inside the fp8 range
    std::vector<float> ks(spec.per_head_scales ? std::size_t(Hkv) : 1), vs(ks.size());
    for (std::size_t h = 0; h < ks.size(); ++h) {
      ks[h] = base * (1.0f + 0.37f * float(h));
      vs[h] = base * (1.3f + 0.21f * float(h));
    }
    c.cache->set_scales(ks, vs);
  }
  c.cache->fill(std::numeric_limits<float>::quiet_NaN());  // unused slots are poison

  // K/V for every position of every sequence (shared prefix positions equal sequence 0's).
  c.dense_k.resize(S);
  c.dense_v.resize(S);
  for (std::size_t s = 0; s < S; ++s) {
    const int len = lens[s], first_new = shared[s] * bs;
    Buffer k = random_buffer(rng, io, {len, Hkv, D}, spec.value_range);
    Buffer v = random_buffer(rng, io, {len, Hkv, Dv}, spec.value_range);
    if (spec.plant_keys) plant_keys(rng, planting, k, first_new, len, Hkv, D, spec.value_range);
    // Dense fp64 copies of what the cache will hold. fp8 values are quantized as KVCache::write
    // does it, times the float reciprocal of the scale: dividing instead rounds a value at an
    // fp8 rounding boundary the other way now and then, one fp8 step from what is stored.
    auto quantized = [&](double val, float scale) { return round_to(double(float(val) * (1.0f / scale)), cs.dtype) * scale; };
    auto& dk = c.dense_k[s];
    auto& dv = c.dense_v[s];
    dk.resize(std::size_t(len) * Hkv * D);
    dv.resize(std::size_t(len) * Hkv * Dv);
    // A per-token-head vector as the cache will hold it: quantized by the one quantizer
    // (token_head::quantize, which the store's vector form matches byte for byte), dequantized.
    auto token_row = [&](const Buffer& src, int64_t first, int n, double* dst) {
      std::vector<float> row(static_cast<std::size_t>(n));
      std::vector<uint8_t> codes(static_cast<std::size_t>(n));
      for (int x = 0; x < n; ++x) row[std::size_t(x)] = load_as_float(src.data(), io, first + x);
      if (cs.int4()) {  // rotated, rounded to the written dtype, quantized; rotated back in fp64
        int4_head::rotate(row.data(), n);
        for (float& y : row) y = float(round_to(y, io));
        const float sc = int4_head::quantize(row.data(), n, codes.data(), nullptr);
        int4_head::dequantize(codes.data(), sc, n, row.data());
        for (int x = 0; x < n; ++x) dst[x] = row[std::size_t(x)];
        unrotate_fp64(dst, n);
        return;
      }
      const float sc = token_head::quantize(row.data(), n, cs.dtype, codes.data(), nullptr);
      for (int x = 0; x < n; ++x) dst[x] = double(load_as_float(codes.data(), cs.dtype, x)) * sc;
    };
    // An nvfp4 vector as the cache holds it: the one quantizer (nvfp4::quantize, which write_kv
    // calls), dequantized, times the global scale.
    auto nvfp4_row = [&](const Buffer& src, int64_t first, int n, float g, double* dst) {
      std::vector<float> row(static_cast<std::size_t>(n));
      std::vector<uint8_t> bytes(static_cast<std::size_t>(nvfp4::row_bytes(n)));
      for (int x = 0; x < n; ++x) row[std::size_t(x)] = load_as_float(src.data(), io, first + x);
      nvfp4::quantize(row.data(), n, 1.0f / g, cs.kv_cache_dtype == KVCacheDType::nvfp4_4over6, bytes.data(), nullptr);
      nvfp4::dequantize(bytes.data(), n, row.data());
      for (int x = 0; x < n; ++x) dst[x] = double(row[std::size_t(x)]) * g;
    };
    // A turboquant slot as the cache holds it: K dequantized (3 / 4 bits: rotated back into the
    // model's space in fp64), V dequantized.
    auto tq_rows = [&](int64_t k_first, int64_t v_first, double* kd, double* vd) {
      const turboquant::Format f = turboquant::format_of(cs.kv_cache_dtype);
      std::vector<float> row(static_cast<std::size_t>(D));
      std::vector<uint8_t> bytes(static_cast<std::size_t>(turboquant::slot_bytes(f, D)));
      for (int x = 0; x < D; ++x) row[std::size_t(x)] = load_as_float(k.data(), io, k_first + x);
      turboquant::quantize_key(row.data(), D, f, bytes.data(), nullptr);
      turboquant::dequantize_key(bytes.data(), D, f, row.data());
      for (int x = 0; x < D; ++x) kd[x] = row[std::size_t(x)];
      if (!f.key_fp8()) {  // y = H·x / √D: x = H·y / √D
        int4_head::hadamard(kd, D);
        for (int x = 0; x < D; ++x) kd[x] /= std::sqrt(double(D));
      }
      for (int x = 0; x < D; ++x) row[std::size_t(x)] = load_as_float(v.data(), io, v_first + x);
      turboquant::quantize_value(row.data(), D, f, bytes.data(), nullptr);
      turboquant::dequantize_value(bytes.data(), D, f, row.data());
      for (int x = 0; x < D; ++x) vd[x] = row[std::size_t(x)];
    };
    for (int t = 0; t < len; ++t)
      for (int h = 0; h < Hkv; ++h) {
        if (cs.turboquant() && t >= first_new) {
          tq_rows((int64_t(t) * Hkv + h) * D, (int64_t(t) * Hkv + h) * Dv, &dk[(std::size_t(t) * Hkv + h) * D],
                  &dv[(std::size_t(t) * Hkv + h) * Dv]);
          continue;
        }
        if (nvfp4 && t >= first_new) {
          nvfp4_row(k, (int64_t(t) * Hkv + h) * D, D, c.cache->k_scales()[std::size_t(h)], &dk[(std::size_t(t) * Hkv + h) * D]);
          nvfp4_row(v, (int64_t(t) * Hkv + h) * Dv, Dv, c.cache->v_scales()[std::size_t(h)], &dv[(std::size_t(t) * Hkv + h) * Dv]);
          continue;
        }
        if (token && t >= first_new) {
          token_row(k, (int64_t(t) * Hkv + h) * D, D, &dk[(std::size_t(t) * Hkv + h) * D]);
          token_row(v, (int64_t(t) * Hkv + h) * Dv, Dv, &dv[(std::size_t(t) * Hkv + h) * Dv]);
          continue;
        }
        const float ksc = c.cache->k_scales()[std::size_t(h)], vsc = c.cache->v_scales()[std::size_t(h)];
        for (int x = 0; x < D; ++x) {
          const std::size_t i = (std::size_t(t) * Hkv + h) * D + x;
          if (t < first_new) { dk[i] = c.dense_k[0][i]; continue; }
          const double val = load_as_float(k.data(), io, int64_t(i));
          dk[i] = fp8 ? quantized(val, ksc) : round_to(val, cs.dtype);
        }
        for (int x = 0; x < Dv; ++x) {
          const std::size_t i = (std::size_t(t) * Hkv + h) * Dv + x;
          if (t < first_new) { dv[i] = c.dense_v[0][i]; continue; }
          const double val = load_as_float(v.data(), io, int64_t(i));
          dv[i] = fp8 ? quantized(val, vsc) : round_to(val, cs.dtype);
        }
      }
    // Write only the positions this sequence owns, through the backend's write_kv.
    const int n_new = len - first_new;
    if (n_new == 0) continue;
    BatchMetadata wmd = BatchMetadata::build({SequenceSpec{first_new, n_new, tables[s]}}, bs, total_blocks, true);
    const std::size_t es = dtype_size(io);
    TensorView kv_k = TensorView::contiguous(static_cast<char*>(k.data()) + std::size_t(first_new) * Hkv * D * es, io, {n_new, Hkv, D});
    TensorView kv_v = TensorView::contiguous(static_cast<char*>(v.data()) + std::size_t(first_new) * Hkv * Dv * es, io, {n_new, Hkv, Dv});
    c.impl->write_kv(kv_k, kv_v, *c.cache, wmd);
  }

  std::vector<SequenceSpec> step;
  for (std::size_t s = 0; s < S; ++s) {
    SequenceSpec seq{spec.seqs[s].context_len, spec.seqs[s].query_len, tables[s]};
    if (spec.mm_prefix) {  // a range in the sequence (often around the new tokens), sometimes empty
      const int64_t len = seq.context_len + seq.query_len;
      seq.mm_start = std::uniform_int_distribution<int64_t>(0, len)(rng);
      seq.mm_end = std::uniform_int_distribution<int64_t>(seq.mm_start, len)(rng);
    }
    step.push_back(std::move(seq));
  }
  c.md = BatchMetadata::build(step, bs, total_blocks, cfg.causal());
  c.q = random_buffer(rng, io, {c.md.num_tokens, H, D}, spec.value_range);
  if (spec.plant_keys)
    for (int64_t t = 0; t < c.md.num_tokens; ++t)
      for (int h = 0; h < H; ++h)
        for (int x = 0; x < D; ++x) {
          const int64_t i = (t * H + h) * D + x;
          const float bias = planting.q_bias * spec.value_range * planting.dir[std::size_t(h / (H / Hkv)) * D + x];
          store_from_float(c.q.data(), io, i, load_as_float(c.q.data(), io, i) + bias);
        }
  c.out = Buffer(io, {c.md.num_tokens, H, Dv});
  return c;
}

void run_forward(Case& c) {
  const int64_t n = c.out.view().numel();
  for (int64_t i = 0; i < n; ++i) store_from_float(c.out.data(), c.out.dtype(), i, std::numeric_limits<float>::quiet_NaN());
  c.impl->forward(c.q.view(), *c.cache, c.md, c.out.view());
}

std::vector<double> output_values(const Case& c) {
  const int64_t n = c.out.view().numel();
  std::vector<double> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[std::size_t(i)] = load_as_float(c.out.data(), c.out.dtype(), i);
  return v;
}

CompareResult compare_output(const Case& c, const std::vector<double>& ref, Tolerance tol) {
  CompareResult r;
  const auto got = output_values(c);
  const int H = c.params.config.num_heads;
  const int Dv = int(c.out.shape().back());
  if (got.size() != ref.size()) {
    r.ok = false;
    r.message = "output size " + std::to_string(got.size()) + " != reference size " + std::to_string(ref.size());
    return r;
  }
  const testkit::ElementCheck e = testkit::check_elements(
      int64_t(got.size()), [&](int64_t i) { return got[std::size_t(i)]; }, [&](int64_t i) { return ref[std::size_t(i)]; }, tol);
  r.ok = e.ok, r.max_abs_err = e.max_abs_err, r.tolerance_used = e.tolerance_used;
  if (!e.ok) {
    const std::size_t i = std::size_t(e.first_failure);
    const std::size_t tok = i / (std::size_t(H) * Dv), h = (i / Dv) % H, x = i % Dv;
    std::ostringstream os;
    os << (std::isfinite(got[i]) ? "mismatch" : "unwritten/NaN") << " at token " << tok << " head " << h << " dim " << x
       << ": got " << got[i] << ", expected " << ref[i] << " (atol " << tol.atol << ", rtol " << tol.rtol << ")";
    if (!std::isfinite(ref[i])) os << " [the reference itself is not finite]";
    r.message = os.str();
  }
  return r;
}

CompareResult compare_output(const Case& c, const std::vector<double>& ref) {
  double v_max = 0;
  for (const auto& seq : c.dense_v)
    for (double v : seq) v_max = std::max(v_max, std::fabs(v));
  return compare_output(c, ref, tolerance(c.params.config.dtype, c.cache->spec().dtype, ref, v_max));
}

CompareResult check_backend(const CaseSpec& spec, const std::string& backend) {
  Case c = make_case(spec, backend);
  run_forward(c);
  return compare_output(c, reference_attention(c));
}

}  // namespace attn::test
