// The independent fp64 dense attention reference, and the same computation with one known kernel
// bug planted (planted_faults.hpp): the faults change only which keys a row sees, the scale, or
// how the row's softmax is combined, so each is a few lines next to the correct rule.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "support/planted_faults.hpp"
#include "support/test_support.hpp"

namespace attn::test {

std::vector<FaultKind> all_faults() {
  return {FaultKind::equal_weight_merge, FaultKind::drop_last_split,  FaultKind::missing_diagonal,
          FaultKind::no_rescale,         FaultKind::scale_one_over_d, FaultKind::window_off_by_one};
}

std::string to_string(FaultKind k) {
  switch (k) {
    case FaultKind::none: return "none";
    case FaultKind::equal_weight_merge: return "equal-weight merge of split partials";
    case FaultKind::drop_last_split: return "last split dropped";
    case FaultKind::missing_diagonal: return "diagonal key missing";
    case FaultKind::no_rescale: return "running output not rescaled";
    case FaultKind::scale_one_over_d: return "scale 1/d instead of 1/sqrt(d)";
    case FaultKind::window_off_by_one: return "sliding window off by one";
  }
  return "?";
}

namespace {

// One query row: the keys it sees and their final logits (scale, soft-cap, ALiBi applied).
struct Row {
  std::vector<int> keys;
  std::vector<double> logits;
};

// Softmax-weighted sum of V over `idx` (indices into row), the sink (when given) counted in the
// denominator only: acc / denom, or 0 for an empty denominator (fully masked row).
void softmax_pv(const Row& row, const std::vector<std::size_t>& idx, const double* sink, const std::vector<double>& V,
                int Hkv, int kh, int Dv, double* out) {
  double m = sink ? *sink : -std::numeric_limits<double>::infinity();
  for (std::size_t j : idx) m = std::max(m, row.logits[j]);
  double denom = sink ? std::exp(*sink - m) : 0.0;
  std::vector<double> acc(std::size_t(Dv), 0.0);
  for (std::size_t j : idx) {
    const double p = std::exp(row.logits[j] - m);
    denom += p;
    for (int x = 0; x < Dv; ++x) acc[std::size_t(x)] += p * V[(std::size_t(row.keys[j]) * Hkv + kh) * Dv + x];
  }
  // Only an empty row yields 0; a NaN denominator (a NaN key) must stay NaN, not read as "empty".
  for (int x = 0; x < Dv; ++x) out[x] = denom == 0 ? 0.0 : acc[std::size_t(x)] / denom;
}

// Online softmax over chunks of `split` positions that forgets to rescale the running output
// when a later chunk raises the max (the denominator is rescaled correctly).
void unrescaled_online_softmax(const Row& row, int split, const double* sink, const std::vector<double>& V, int Hkv,
                               int kh, int Dv, double* out) {
  std::map<int, std::vector<std::size_t>> chunks;
  for (std::size_t j = 0; j < row.keys.size(); ++j) chunks[row.keys[j] / split].push_back(j);
  double m = sink ? *sink : -std::numeric_limits<double>::infinity(), l = sink ? 1.0 : 0.0;
  std::vector<double> acc(std::size_t(Dv), 0.0);
  for (const auto& [chunk, idx] : chunks) {
    double mc = m;
    for (std::size_t j : idx) mc = std::max(mc, row.logits[j]);
    l *= std::exp(m - mc);  // acc should be scaled by the same factor: the bug
    for (std::size_t j : idx) {
      const double p = std::exp(row.logits[j] - mc);
      l += p;
      for (int x = 0; x < Dv; ++x) acc[std::size_t(x)] += p * V[(std::size_t(row.keys[j]) * Hkv + kh) * Dv + x];
    }
    m = mc;
  }
  for (int x = 0; x < Dv; ++x) out[x] = l == 0 ? 0.0 : acc[std::size_t(x)] / l;
}

}  // namespace

std::vector<double> reference_attention(const Case& c) { return reference_attention(c, Fault{}); }

std::vector<double> reference_attention(const Case& c, const Fault& fault) {
  const LayerConfig& cfg = c.params.config;
  const int H = cfg.num_heads, Hkv = cfg.num_kv_heads, D = cfg.head_size, Dv = cfg.effective_head_size_v();
  const int group = H / Hkv;
  const FaultKind f = fault.kind;
  double scale = c.params.scale > 0 ? c.params.scale : 1.0 / std::sqrt(double(D));
  if (f == FaultKind::scale_one_over_d) scale /= std::sqrt(double(D));
  const int window = cfg.sliding_window + (f == FaultKind::window_off_by_one && cfg.sliding_window > 0 ? 1 : 0);
  std::vector<float> slopes = c.params.alibi_slopes;
  if (cfg.use_alibi && slopes.empty()) slopes = alibi_slopes(H);
  std::vector<double> out(std::size_t(c.md.num_tokens) * H * Dv, 0.0);
  // q as the attention sees it (int4 caches: rotated and rounded like the format says, back in fp64).
  std::vector<double> qv(std::size_t(c.md.num_tokens) * H * D);
  for (int64_t r = 0; r < int64_t(c.md.num_tokens) * H; ++r) {
    if (cfg.kv_cache_dtype == KVCacheDType::int4_per_token_head) {
      int4_query_fp64(c.q.data(), c.q.dtype(), r * D, D, &qv[std::size_t(r) * D]);
      continue;
    }
    for (int x = 0; x < D; ++x) qv[std::size_t(r) * D + x] = load_as_float(c.q.data(), c.q.dtype(), r * D + x);
  }
  for (int s = 0; s < c.md.num_seqs; ++s) {
    const int len = c.md.seq_lens[s], ql = c.md.query_len(s), q0 = c.md.query_start_loc[s];
    const auto& K = c.dense_k[std::size_t(s)];
    const auto& V = c.dense_v[std::size_t(s)];
    for (int i = 0; i < ql; ++i) {
      const int qpos = len - ql + i;
      // use_mm_prefix: a query inside its sequence's multimodal prefix sees the whole prefix.
      const bool mm = cfg.use_mm_prefix && !c.md.mm_prefix_ranges.empty();
      const int last = mm && qpos >= c.md.mm_prefix_ranges[2 * s] && qpos < c.md.mm_prefix_ranges[2 * s + 1]
                           ? c.md.mm_prefix_ranges[2 * s + 1] - 1 : qpos;
      for (int h = 0; h < H; ++h) {
        const int kh = h / group;
        Row row;
        for (int t = 0; t < len; ++t) {
          if (c.md.causal && (t > last || (f == FaultKind::missing_diagonal && t == qpos))) continue;
          if (window > 0 && t <= qpos - window) continue;
          double dot = 0;
          for (int x = 0; x < D; ++x)
            dot += qv[(std::size_t(q0 + i) * H + h) * D + x] * K[(std::size_t(t) * Hkv + kh) * D + x];
          double sc = dot * scale;
          if (cfg.logits_soft_cap > 0) sc = cfg.logits_soft_cap * std::tanh(sc / cfg.logits_soft_cap);
          if (cfg.use_alibi) sc += double(slopes[std::size_t(h)]) * double(t - qpos);
          row.logits.push_back(sc);
          row.keys.push_back(t);
        }
        const double sink_value = cfg.has_sink ? double(c.params.sinks[std::size_t(h)]) : 0.0;
        const double* sink = cfg.has_sink ? &sink_value : nullptr;
        double* o = out.data() + (std::size_t(q0 + i) * H + h) * Dv;
        // Rows by split (absolute positions / fault.split); the faults below act on them.
        std::map<int, std::vector<std::size_t>> splits;
        for (std::size_t j = 0; j < row.keys.size(); ++j) splits[row.keys[j] / fault.split].push_back(j);
        if (f == FaultKind::drop_last_split && splits.size() > 1) splits.erase(std::prev(splits.end()));
        if (f == FaultKind::no_rescale) {
          unrescaled_online_softmax(row, fault.split, sink, V, Hkv, kh, Dv, o);
        } else if (f == FaultKind::equal_weight_merge && splits.size() > 1) {
          std::vector<double> part(static_cast<std::size_t>(Dv));
          bool first = true;
          for (const auto& [split, idx] : splits) {
            softmax_pv(row, idx, first ? sink : nullptr, V, Hkv, kh, Dv, part.data());
            for (int x = 0; x < Dv; ++x) o[x] += part[std::size_t(x)] / double(splits.size());
            first = false;
          }
        } else {
          std::vector<std::size_t> idx;
          for (const auto& [split, in_split] : splits) idx.insert(idx.end(), in_split.begin(), in_split.end());
          softmax_pv(row, idx, sink, V, Hkv, kh, Dv, o);
        }
      }
    }
  }
  return out;
}

}  // namespace attn::test
