// Finishing rows: the log-sum-exp merge of split KV ranges (fixed order, so results do not
// depend on which thread ran which split) and the final normalization shared by every path.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attn/error.hpp"
#include "attn/numeric.hpp"
#include "backends/cpu_flash/plan.hpp"

namespace attn::cpu_flash {

KvType kv_type_of(DType d) {
  switch (d) {
    case DType::float32: return KvType::f32;
    case DType::float16: return KvType::f16;
    case DType::bfloat16: return KvType::bf16;
    case DType::fp8_e4m3: return KvType::e4m3;
    case DType::fp8_e5m2: return KvType::e5m2;
    case DType::int8: return KvType::i8;
    default: break;
  }
  throw Error("cache.dtype=" + std::string(to_string(d)) +
              " invalid: expected one of float32, float16, bfloat16, fp8_e4m3, fp8_e5m2, int8 (cpu_flash)");
}

float row_factor(const KernelArgs& a, int head, float m, float l) {
  const int kvh = head / a.group;
  float factor;
  if (a.sinks) {
    // The sink is one more logit in the denominator with no value row.
    const float sink = a.sinks[head];
    const float mm = std::max(m, sink);
    const float w = std::exp(m - mm);
    factor = w / (l * w + std::exp(sink - mm));
  } else {
    factor = l == 0.0f ? 0.0f : 1.0f / l;  // fully masked row -> 0 (a NaN sum stays NaN)
  }
  return factor * a.kv.v_scales[kvh] * (a.kv_type == KvType::e4m3 ? kE4m3Rebias : 1.0f);
}

void store_row(const KernelArgs& a, int64_t token, int head, const float* o, float m, float l) {
  const float factor = row_factor(a, head, m, l);
  const int64_t base = token * a.o_tok_stride + int64_t(head) * a.o_head_stride;
  const int dv = a.head_size_v;
  switch (a.out_dtype) {
    case DType::float32: {
      float* dst = static_cast<float*>(a.out) + base;
      for (int d = 0; d < dv; ++d) dst[d] = o[d] * factor;
      break;
    }
    case DType::bfloat16: {
      uint16_t* dst = static_cast<uint16_t*>(a.out) + base;
      for (int d = 0; d < dv; ++d) dst[d] = f32_to_bf16(o[d] * factor);
      break;
    }
    default: {
      uint16_t* dst = static_cast<uint16_t*>(a.out) + base;
      for (int d = 0; d < dv; ++d) dst[d] = f32_to_f16(o[d] * factor);
      break;
    }
  }
}

void run_merges(const KernelArgs& a, const Plan& plan, const float* partials, int num_threads) {
  const int dv = a.head_size_v, g = a.group;
#pragma omp parallel num_threads(num_threads)
  {
    thread_local std::vector<float> o;  // per thread, grown once: no allocation in steady state
    o.resize(static_cast<std::size_t>(dv));
#pragma omp for schedule(dynamic, 1)
    for (std::size_t i = 0; i < plan.merges.size(); ++i) {
      const Merge& mg = plan.merges[i];
      const int rows = (mg.q_end - mg.q_begin) * g;
      const int64_t stride = partial_floats(rows, dv);
      for (int r = 0; r < rows; ++r) {
        // A split that saw a NaN score has a NaN max: the row's max is NaN then (std::max would
        // drop it and a row of NaN splits would come out 0, a fully masked row).
        float m = -std::numeric_limits<float>::infinity();
        for (int k = 0; k < mg.count; ++k) {
          const float mk = partials[mg.partial0 + k * stride + int64_t(rows) * dv + r];
          m = std::isnan(mk) || std::isnan(m) ? std::numeric_limits<float>::quiet_NaN() : std::max(m, mk);
        }
        std::fill(o.begin(), o.end(), 0.0f);
        float l = 0.0f;
        if (m != -std::numeric_limits<float>::infinity()) {
          for (int k = 0; k < mg.count; ++k) {
            const float* p = partials + mg.partial0 + k * stride;
            const float mk = p[int64_t(rows) * dv + r], lk = p[int64_t(rows) * (dv + 1) + r];
            if (mk == -std::numeric_limits<float>::infinity()) continue;
            const float w = std::exp(mk - m);
            l += lk * w;
            const float* ok = p + int64_t(r) * dv;
            for (int d = 0; d < dv; ++d) o[d] += ok[d] * w;
          }
        }
        const int64_t token = a.query_start_loc[mg.seq] + mg.q_begin + r / g;
        store_row(a, token, mg.kv_head * g + r % g, o.data(), m, l);
      }
    }
  }
}

}  // namespace attn::cpu_flash
