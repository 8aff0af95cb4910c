// reference: plain loops, every feature, fp32 accumulation. The oracle the fast backends are
// checked against at run time (`attn run` spot check, `attn check`); lowest priority.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include <omp.h>

#include "attn/backend.hpp"
#include "attn/error.hpp"
#include "attn/limits.hpp"
#include "backends/cpu_dense_descriptor.hpp"
#include "cpu/threads.hpp"

namespace attn {
namespace {

/// Per-thread scratch of one (sequence, KV head): its dequantized K and V rows, the scores of one
/// query row, the output accumulator and the query row, for the step's longest sequence.
struct Scratch {
  std::size_t len, d, dv;
  std::size_t floats() const { return len * d + len * dv + len + dv + d; }
  float* K(float* base) const { return base; }
  float* V(float* base) const { return base + len * d; }
  float* scores(float* base) const { return V(base) + len * dv; }
  float* acc(float* base) const { return scores(base) + len; }
  float* qrow(float* base) const { return acc(base) + dv; }
};

/// The reference's plan: the validated metadata and one scratch slot per thread.
class ReferenceStepPlan final : public StepPlan {
 public:
  ReferenceStepPlan(const LayerConfig& c, const BatchMetadata& md, const KVCacheSpec& spec, int slots)
      : StepPlan("reference", c, md, spec),
        scratch_{std::size_t(std::max(md.max_seq_len, 0)), std::size_t(c.head_size), std::size_t(spec.v_width())},
        slots_(slots) {}
  const Scratch& scratch() const { return scratch_; }
  int slots() const { return slots_; }
  std::size_t slot_floats() const { return (scratch_.floats() + 15) / 16 * 16; }  // 64-byte aligned slots
  std::size_t workspace_bytes() const override { return slot_floats() * sizeof(float) * std::size_t(slots_); }

 private:
  Scratch scratch_;
  int slots_;
};

class ReferenceImpl final : public AttentionImpl {
 public:
  explicit ReferenceImpl(const LayerParams& p) : AttentionImpl("reference", p) {
    if (params_.config.use_alibi && params_.alibi_slopes.empty()) params_.alibi_slopes = alibi_slopes(params_.config.num_heads);
  }

  std::shared_ptr<const StepPlan> plan(const BatchMetadata& md, const KVCacheSpec& cache) const override {
    check_plan_args(params_, md, cache);
    return std::make_shared<ReferenceStepPlan>(params_.config, md, cache, threads());
  }

  RunResult run(const StepPlan& step, const ForwardArgs& args) const override {
    begin_run(step, args);
    const auto& plan = static_cast<const ReferenceStepPlan&>(step);  // begin_run checked it is the reference's
    Workspace own;
    float* const ws = static_cast<float*>(scratch(args, own, plan.workspace_bytes()));
    const Scratch& sc = plan.scratch();
    const int team = std::min(threads(), plan.slots());
    const BatchMetadata& md = plan.metadata();
    const TensorView &q = args.q, &out = args.out;
    const LayerParams& p_ = params_;
    const LayerConfig& c = p_.config;
    const PagedKV kv = args.cache->view();
    const int group = c.num_heads / c.num_kv_heads;
    const int d = c.head_size, dv = kv.head_size_v;
    const float scale = p_.effective_scale();
    const char* base = static_cast<const char*>(kv.base);
    const int32_t* mm = c.use_mm_prefix && !md.mm_prefix_ranges.empty() ? md.mm_prefix_ranges.data() : nullptr;

#pragma omp parallel for collapse(2) schedule(dynamic) num_threads(team)
    for (int s = 0; s < md.num_seqs; ++s) {
      for (int kh = 0; kh < c.num_kv_heads; ++kh) {
        const int len = md.seq_lens[s], qlen = md.query_len(s), q0 = md.query_start_loc[s];
        float* const slot = ws + plan.slot_floats() * std::size_t(omp_get_thread_num());
        float *K = sc.K(slot), *V = sc.V(slot), *scores = sc.scores(slot), *acc = sc.acc(slot), *qrow = sc.qrow(slot);
        // Dequantize this sequence's K and V rows for one KV head once.
        for (int t = 0; t < len; ++t) {
          const int64_t b = md.blocks(s)[t / kv.block_size], bt = t % kv.block_size;
          // Per-token-head caches: the slot's own scales; others: the tensor's or the head's.
          const int64_t ts = kv.k_token_scales ? token_scale_index(kv, b, bt, kh) : 0;
          const float ks = kv.k_token_scales ? kv.k_token_scales[ts] : kv.k_scales[kh];
          const float vs = kv.v_token_scales ? kv.v_token_scales[ts] : kv.v_scales[kh];
          if (kv.int4) {  // packed codes of rotated vectors: dequantized, then rotated back
            float* k = K + std::size_t(t) * d;
            float* v = V + std::size_t(t) * dv;
            uint8_t codes[limits::kMaxHeadSize / 2];
            int4_head::load_vector(kv, b, bt, kh, false, d, codes);
            int4_head::dequantize(codes, ks, d, k);
            int4_head::load_vector(kv, b, bt, kh, true, dv, codes);
            int4_head::dequantize(codes, vs, dv, v);
            int4_head::unrotate(k, d), int4_head::unrotate(v, dv);
            continue;
          }
          if (kv.turboquant) {  // the slot's K (rotated centroids back in the model's space) and V
            float* k = K + std::size_t(t) * d;
            const uint8_t* slot = reinterpret_cast<const uint8_t*>(base) + kv_element_offset(kv, b, bt, kh, 0, false);
            turboquant::dequantize_key(slot, d, kv.tq, k);
            if (!kv.tq.key_fp8()) turboquant::rotate(k, d);  // its own inverse
            turboquant::dequantize_value(slot + kv.v_offset, dv, kv.tq, V + std::size_t(t) * dv);
            continue;
          }
          if (kv.nvfp4) {  // e2m1 codes times their block scales, then the global scale
            float* k = K + std::size_t(t) * d;
            float* v = V + std::size_t(t) * dv;
            nvfp4::dequantize(reinterpret_cast<const uint8_t*>(base) + kv_element_offset(kv, b, bt, kh, 0, false), d, k);
            nvfp4::dequantize(reinterpret_cast<const uint8_t*>(base) + kv_element_offset(kv, b, bt, kh, 0, true), dv, v);
            for (int i = 0; i < d; ++i) k[i] *= ks;
            for (int i = 0; i < dv; ++i) v[i] *= vs;
            continue;
          }
          for (int i = 0; i < d; ++i)
            K[std::size_t(t) * d + i] = load_as_float(base, kv.dtype, kv_element_offset(kv, b, bt, kh, i, false)) * ks;
          for (int i = 0; i < dv; ++i)
            V[std::size_t(t) * dv + i] = load_as_float(base, kv.dtype, kv_element_offset(kv, b, bt, kh, i, true)) * vs;
        }
        for (int g = 0; g < group; ++g) {
          const int h = kh * group + g;
          for (int i = 0; i < qlen; ++i) {
            const int64_t tok = q0 + i;
            const int qpos = len - qlen + i;  // bottom-right alignment
            for (int x = 0; x < d; ++x)
              qrow[x] = load_as_float(q.data, q.dtype, tok * q.strides[0] + h * q.strides[1] + x);
            if (kv.int4) {  // the format's query: rotated, rounded to q's dtype, seen here rotated back
              int4_head::rotate_query(qrow, d, q.dtype);
              int4_head::unrotate(qrow, d);
            }
            float m = -std::numeric_limits<float>::infinity();
            for (int t = 0; t < len; ++t) {
              if (!visible(qpos, t, md.causal, mm, s)) { scores[t] = -std::numeric_limits<float>::infinity(); continue; }
              float sc = 0.0f;
              for (int x = 0; x < d; ++x) sc += qrow[x] * K[std::size_t(t) * d + x];
              sc *= scale;
              if (c.logits_soft_cap > 0) sc = c.logits_soft_cap * std::tanh(sc / c.logits_soft_cap);
              if (c.use_alibi) sc += p_.alibi_slopes[h] * float(t - qpos);
              scores[t] = sc;
              m = (std::isnan(m) || sc <= m) ? m : sc;  // a NaN score (NaN / Inf in q or K) makes m NaN for good

            }
            if (c.has_sink) m = std::max(m, p_.sinks[h]);
            std::fill(acc, acc + dv, 0.0f);
            float denom = c.has_sink ? std::exp(p_.sinks[h] - m) : 0.0f;
            if (m != -std::numeric_limits<float>::infinity()) {
              for (int t = 0; t < len; ++t) {
                if (scores[t] == -std::numeric_limits<float>::infinity()) continue;
                const float pr = std::exp(scores[t] - m);
                denom += pr;
                for (int x = 0; x < dv; ++x) acc[x] += pr * V[std::size_t(t) * dv + x];
              }
            }
            const float inv = denom == 0 ? 0.0f : 1.0f / denom;  // fully masked row → 0; NaN stays NaN
            for (int x = 0; x < dv; ++x)
              store_from_float(out.data, out.dtype, tok * out.strides[0] + h * out.strides[1] + x, acc[x] * inv);
          }
        }
      }
    }
    return {};
  }

 private:
  /// `mm`: the step's multimodal prefix ranges on use_mm_prefix layers (else null).
  bool visible(int qpos, int kpos, bool causal, const int32_t* mm, int s) const {
    if (causal && kpos > BatchMetadata::mm_causal_limit(mm, s, qpos)) return false;
    if (params_.config.sliding_window > 0 && kpos <= qpos - params_.config.sliding_window) return false;
    return true;
  }
  int threads() const { return cpu::team_size(params_.num_threads); }
};

}  // namespace

BackendDescriptor reference_descriptor() {
  BackendDescriptor d = cpu_dense_every_format_descriptor(
      "reference", "plain loops, every feature, fp32 accumulation; the oracle (lowest priority)", SizeRule::any());
  d.caps.distinct_head_size_v = true;
  d.caps.batch_invariance = true;  // each (sequence, head) is computed alone, in a fixed order
  d.caps.attn_types = all_attn_types();
  d.priority = 1000;
  d.oracle = true;
  d.preferred_block_size = 16;
  d.kv_layout = KVLayout::NHD;
  d.create = [](const LayerParams& p) -> std::unique_ptr<AttentionImpl> { return std::make_unique<ReferenceImpl>(p); };
  return d;
}

}  // namespace attn
