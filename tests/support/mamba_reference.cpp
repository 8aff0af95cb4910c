// fp64 references for the mixers: the recurrences written the plain way, one token at a time.
#include "support/mamba_reference.hpp"

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>

namespace attn::test {

namespace {

double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double silu(double x) { return x * sigmoid(x); }

double at(const TensorView& t, int64_t i) { return double(t.ptr<const float>()[i]); }

// Causal depthwise conv over one sequence: rows [t0, t0+len) of x ([T, dim]), history in `st`
// ([dim, K-1], oldest first). Returns [len, dim].
std::vector<double> ref_conv(const MixerParams& p, const TensorView& x, int64_t t0, int64_t len, std::vector<double>& st,
                             bool init, bool activation) {
  const int64_t dim = p.config.conv_dim(), K = p.config.d_conv, H = K - 1;
  std::vector<double> y(std::size_t(len * dim));
  for (int64_t c = 0; c < dim; ++c) {
    std::vector<double> win(static_cast<std::size_t>(H), 0.0);
    for (int64_t i = 0; i < H; ++i) win[i] = init ? st[c * H + i] : 0.0;
    for (int64_t t = 0; t < len; ++t) {
      const double xv = at(x, (t0 + t) * dim + c);
      double acc = p.conv_bias.empty() ? 0.0 : p.conv_bias[c];
      for (int64_t i = 0; i < H; ++i) acc += double(p.conv_weight[c * K + i]) * win[i];
      acc += double(p.conv_weight[c * K + H]) * xv;
      if (H > 0) {
        win.erase(win.begin());
        win.push_back(xv);
      }
      y[t * dim + c] = activation ? silu(acc) : acc;
    }
    for (int64_t i = 0; i < H; ++i) st[c * H + i] = win[i];
  }
  return y;
}

double opt(const std::vector<float>& v, int64_t i) { return v.empty() ? 0.0 : double(v[i]); }

void ref_mamba1(const MixerParams& p, const MixerInputs& in, const std::vector<double>& xc, int64_t t0, int64_t len,
                std::vector<double>& h, std::vector<double>& out) {
  const int64_t D = p.config.d_inner, N = p.config.d_state;
  for (int64_t t = 0; t < len; ++t) {
    const int64_t g = t0 + t;
    for (int64_t d = 0; d < D; ++d) {
      const double dt = softplus(at(in.dt, g * D + d) + opt(p.dt_bias, d)), x = xc[t * D + d];
      double y = 0;
      for (int64_t n = 0; n < N; ++n) {
        double& s = h[d * N + n];
        s = std::exp(dt * p.A[d * N + n]) * s + dt * x * at(in.B, g * N + n);
        y += s * at(in.C, g * N + n);
      }
      y += opt(p.D, d) * x;
      if (in.z.data) y *= silu(at(in.z, g * D + d));
      out[g * D + d] = y;
    }
  }
}

void ref_mamba2(const MixerParams& p, const MixerInputs& in, const std::vector<double>& xbc, int64_t t0, int64_t len,
                std::vector<double>& S, std::vector<double>& out) {
  const MixerConfig& c = p.config;
  const int64_t H = c.num_heads, P = c.head_dim, N = c.d_state, G = c.n_groups, CD = c.conv_dim();
  for (int64_t t = 0; t < len; ++t) {
    const int64_t g = t0 + t;
    const double* row = xbc.data() + t * CD;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t grp = h / (H / G);
      const double* B = row + H * P + grp * N;
      const double* C = row + H * P + G * N + grp * N;
      const double dt = softplus(at(in.dt, g * H + h) + opt(p.dt_bias, h)), decay = std::exp(dt * p.A[h]);
      for (int64_t q = 0; q < P; ++q) {
        const double x = row[h * P + q];
        double y = 0;
        for (int64_t n = 0; n < N; ++n) {
          double& s = S[(h * P + q) * N + n];
          s = decay * s + dt * x * B[n];
          y += s * C[n];
        }
        y += opt(p.D, h) * x;
        if (in.z.data) y *= silu(at(in.z, g * H * P + h * P + q));
        out[g * H * P + h * P + q] = y;
      }
    }
  }
}

void ref_linear(const MixerParams& p, const MixerInputs& in, int64_t t0, int64_t len, std::vector<double>& S,
                std::vector<double>& out) {
  const int64_t H = p.config.num_heads, dk = p.config.head_k_dim, dv = p.config.head_v_dim;
  const double scale = p.effective_scale();
  for (int64_t t = t0; t < t0 + len; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const double lambda = std::exp(double(p.A[h]));
      double* Sh = S.data() + h * dk * dv;
      for (int64_t r = 0; r < dk; ++r)
        for (int64_t j = 0; j < dv; ++j)
          Sh[r * dv + j] = lambda * Sh[r * dv + j] + at(in.k, (t * H + h) * dk + r) * at(in.v, (t * H + h) * dv + j);
      for (int64_t j = 0; j < dv; ++j) {
        double o = 0;
        for (int64_t r = 0; r < dk; ++r) o += at(in.x, (t * H + h) * dk + r) * Sh[r * dv + j];
        out[(t * H + h) * dv + j] = scale * o;
      }
    }
  }
}

std::vector<double> l2normed(const double* x, int64_t n) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  std::vector<double> y(x, x + n);
  for (double& v : y) v /= std::sqrt(ss + 1e-6);
  return y;
}

void ref_gdn(const MixerParams& p, const MixerInputs& in, const std::vector<double>& qkv, int64_t t0, int64_t len,
             std::vector<double>& S, std::vector<double>& out) {
  const MixerConfig& c = p.config;
  const int64_t H = c.num_heads, Hk = c.num_k_heads, dk = c.head_k_dim, dv = c.head_v_dim, CD = c.conv_dim();
  const double scale = p.effective_scale();
  for (int64_t t = 0; t < len; ++t) {
    const int64_t g = t0 + t;
    const double* row = qkv.data() + t * CD;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kh = h / (H / Hk);
      const auto q = l2normed(row + kh * dk, dk);
      const auto k = l2normed(row + (Hk + kh) * dk, dk);
      const double* v = row + 2 * Hk * dk + h * dv;
      const double decay = std::exp(p.A[h] * softplus(at(in.dt, g * H + h) + opt(p.dt_bias, h)));
      const double beta = sigmoid(at(in.b, g * H + h));
      double* Sh = S.data() + h * dk * dv;
      for (int64_t i = 0; i < dk * dv; ++i) Sh[i] *= decay;
      for (int64_t j = 0; j < dv; ++j) {
        double kv = 0;
        for (int64_t r = 0; r < dk; ++r) kv += Sh[r * dv + j] * k[r];
        const double delta = beta * (v[j] - kv);
        for (int64_t r = 0; r < dk; ++r) Sh[r * dv + j] += k[r] * delta;
      }
      for (int64_t j = 0; j < dv; ++j) {
        double o = 0;
        for (int64_t r = 0; r < dk; ++r) o += Sh[r * dv + j] * q[r];
        out[(g * H + h) * dv + j] = scale * o;
      }
    }
  }
}

std::vector<double> to_doubles(const float* p, int64_t n) { return std::vector<double>(p, p + n); }

}  // namespace

RefMixerState ref_state_from(const MambaStateCache& cache) {
  RefMixerState r;
  for (int32_t s = 0; s < cache.num_slots(); ++s) {
    r.conv.push_back(cache.conv_slot_floats() ? to_doubles(cache.conv_slot(s), cache.conv_slot_floats())
                                              : std::vector<double>());
    r.ssm.push_back(cache.ssm_slot_floats() ? to_doubles(cache.ssm_slot(s), cache.ssm_slot_floats())
                                            : std::vector<double>());
  }
  return r;
}

std::vector<double> reference_mixer(const MixerParams& p, const MixerInputs& in, RefMixerState& state,
                                    const MixerBatch& md) {
  const MixerConfig& c = p.config;
  std::vector<double> out(std::size_t(int64_t(md.num_tokens) * c.out_dim()), 0.0);
  for (int32_t s = 0; s < md.num_seqs; ++s) {
    const int64_t t0 = md.query_start_loc[s], len = md.query_len(s);
    if (len == 0) continue;
    const int32_t slot = md.state_slots[s];
    const bool init = md.has_initial_state[s];
    std::vector<double>& ssm = state.ssm[slot];
    if (!init) std::fill(ssm.begin(), ssm.end(), 0.0);
    switch (c.type) {
      case MambaType::mamba1:
        ref_mamba1(p, in, ref_conv(p, in.x, t0, len, state.conv[slot], init, true), t0, len, ssm, out);
        break;
      case MambaType::mamba2:
        ref_mamba2(p, in, ref_conv(p, in.x, t0, len, state.conv[slot], init, true), t0, len, ssm, out);
        break;
      case MambaType::gdn_attention:
        ref_gdn(p, in, ref_conv(p, in.x, t0, len, state.conv[slot], init, true), t0, len, ssm, out);
        break;
      case MambaType::linear_attention: ref_linear(p, in, t0, len, ssm, out); break;
      case MambaType::short_conv: {
        const int64_t D = c.d_inner;
        std::vector<float> bx(std::size_t(len * D));
        for (int64_t t = 0; t < len; ++t)
          for (int64_t i = 0; i < D; ++i)
            bx[t * D + i] = float(at(in.x, (t0 + t) * 3 * D + i) * at(in.x, (t0 + t) * 3 * D + 2 * D + i));
        // B·x is formed in float by the kernel too; the conv itself runs in fp64 here.
        const auto y = ref_conv(p, TensorView::contiguous(bx.data(), DType::float32, {len, D}), 0, len,
                                state.conv[slot], init, false);
        for (int64_t t = 0; t < len; ++t)
          for (int64_t i = 0; i < D; ++i) out[(t0 + t) * D + i] = at(in.x, (t0 + t) * 3 * D + D + i) * y[t * D + i];
        break;
      }
      case MambaType::custom: throw Error("reference_mixer: no reference for mamba_type=custom");
    }
  }
  return out;
}

// Observed worst error is ~1e-3 of this on the shipped tests (fp32 rounding plus vexp's 2e-7).
Tolerance mixer_tolerance() { return Tolerance{2e-5, 2e-5}; }

namespace {
// The MixerData buffer behind each MixerInputs view.
using ViewField = TensorView MixerInputs::*;
using BufferField = Buffer MixerData::*;
constexpr std::pair<ViewField, BufferField> kFields[] = {
    {&MixerInputs::x, &MixerData::x},   {&MixerInputs::k, &MixerData::k}, {&MixerInputs::v, &MixerData::v},
    {&MixerInputs::dt, &MixerData::dt}, {&MixerInputs::B, &MixerData::B}, {&MixerInputs::C, &MixerData::C},
    {&MixerInputs::b, &MixerData::b},   {&MixerInputs::z, &MixerData::z}};

BufferField buffer_of(ViewField f) {
  for (const auto& [view, buffer] : kFields)
    if (view == f) return buffer;
  throw Error("mixer input field invalid: expected one of MixerInputs' tensor views");
}
}  // namespace

MixerInputs MixerData::inputs() const {
  MixerInputs in;
  for (const auto& [view, buffer] : kFields) in.*view = (this->*buffer).bytes() ? (this->*buffer).view() : TensorView{};
  return in;
}

namespace {
void fill_uniform(std::vector<float>& v, std::size_t n, std::mt19937_64& rng, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  v.resize(n);
  for (float& x : v) x = d(rng);
}
Buffer random_buffer(std::vector<int64_t> shape, std::mt19937_64& rng, float lo, float hi) {
  Buffer b(DType::float32, shape);
  std::uniform_real_distribution<float> d(lo, hi);
  float* p = static_cast<float*>(b.data());
  for (std::size_t i = 0; i < b.bytes() / 4; ++i) p[i] = d(rng);
  return b;
}
}  // namespace

MixerParams random_mixer_params(const MixerConfig& c, uint64_t seed, bool with_bias) {
  std::mt19937_64 rng(seed);
  MixerParams p;
  p.config = c;
  const int64_t cd = c.conv_dim();
  if (cd > 0) {
    fill_uniform(p.conv_weight, std::size_t(cd * c.d_conv), rng, -0.6f, 0.6f);
    if (with_bias) fill_uniform(p.conv_bias, std::size_t(cd), rng, -0.2f, 0.2f);
  }
  for (const MixerTypeInfo::Weight& w : mixer_type_info(c.type).weights)
    if (with_bias || w.field != &MixerParams::dt_bias) fill_uniform(p.*w.field, std::size_t(w.size(c)), rng, w.lo, w.hi);
  return p;
}

MixerData random_mixer_inputs(const MixerConfig& c, int64_t T, uint64_t seed, bool with_z) {
  std::mt19937_64 rng(seed);
  MixerData d;
  d.config = c;
  d.num_tokens = T;
  for (const MixerTypeInfo::Input& spec : mixer_type_info(c.type).inputs)
    if ((with_z || !spec.optional) && spec.when != MixerTypeInfo::Input::When::convolved)
      d.*buffer_of(spec.field) = random_buffer(spec.shape(c).after(T), rng, spec.lo, spec.hi);
  return d;
}

MixerData slice_tokens(const MixerData& src, int64_t t0, int64_t t1) {
  MixerData d;
  d.config = src.config;
  d.num_tokens = t1 - t0;
  auto cut = [&](const Buffer& b) {
    if (!b.bytes()) return Buffer();
    std::vector<int64_t> shape = b.shape();
    const int64_t row = int64_t(b.bytes() / 4) / shape[0];
    shape[0] = t1 - t0;
    Buffer out(DType::float32, shape);
    std::memcpy(out.data(), static_cast<const float*>(b.data()) + t0 * row, std::size_t((t1 - t0) * row * 4));
    return out;
  };
  for (const auto& [view, buffer] : kFields) d.*buffer = cut(src.*buffer);
  return d;
}

void randomize_states(MambaStateCache& cache, uint64_t seed, float range) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-range, range);
  for (int32_t s = 0; s < cache.num_slots(); ++s) {
    if (cache.conv_slot_floats())
      for (int64_t i = 0; i < cache.conv_slot_floats(); ++i) cache.conv_slot(s)[i] = d(rng);
    if (cache.ssm_slot_floats())
      for (int64_t i = 0; i < cache.ssm_slot_floats(); ++i) cache.ssm_slot(s)[i] = d(rng);
  }
}

MixerCompare compare_values(const float* got, const std::vector<double>& want, Tolerance tol, const std::string& what) {
  MixerCompare r;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]);
    const double ratio = err / (tol.atol + tol.rtol * std::fabs(want[i]));
    if (!(ratio <= 1.0)) {
      if (r.ok) {
        std::ostringstream os;
        os << what << "[" << i << "]: got " << got[i] << ", want " << want[i] << " (|err| " << err << ")";
        r.message = os.str();
      }
      r.ok = false;
    }
    if (std::isnan(ratio)) r.worst_ratio = INFINITY;
    else r.worst_ratio = std::max(r.worst_ratio, ratio);
    if (!std::isnan(err)) r.max_abs_err = std::max(r.max_abs_err, err);
  }
  return r;
}

}  // namespace attn::test
