#pragma once
// THE tolerance table: how far a correct kernel's output may be from the fp64 reference, by the
// q/out dtype and the KV cache's storage dtype. In attn_testkit, so the test suite and the CLI
// (`attn check`, `attn run`) hold kernels to the same numbers.
//
// Why these numbers. The reference reads exactly the values the cache stores (dequantized), so a
// correct kernel differs from it only by
//   - rounding its fp32 result to the output dtype: at most half an ulp, u·|ref|, and
//   - fp32 arithmetic (dot products, exp, the P·V sum, split merges): a few fp32 ulps of the
//     largest value the row mixes, which is never more than the largest output of the case.
// Hence |out - ref| <= rtol·|ref| + atol_of_max·max|ref|, with rtol = 2u of the output dtype (one
// ulp: the rounding plus margin for the fp32 error that can push a value across a rounding
// boundary) and atol_of_max a few fp32 / output ulps. The absolute part scales with the largest
// output of the case, so a case whose outputs shrink (near-uniform weights over long contexts)
// is held to the same relative standard and a wrong merge or a dropped key cannot hide under it.
// bf16 I/O adds one more source: kernels whose P·V runs on bf16 products (vdpbf16ps, like
// FlashAttention's and vLLM's bf16 P) round each weight P to bf16 first, an error of up to 2^-8·P
// per key, i.e. of the order u·|V| rather than u·|out|. Where the weights cancel (outputs much
// smaller than the values they mix, wide score ranges with several near-maximal keys) that
// exceeds a quarter ulp of max|ref|, so the bf16 rule adds a quarter ulp of the largest |V| the
// cache stores (measured: 1.02–1.07 of the old bound in ~6 % of fresh-seed conformance sweeps,
// head 154, 40-token prefills, planted keys).
// fp32 outputs: measured. The worst seen over 6 fresh-seed sweeps of every dense CPU backend was
// 2.4e-6·max|ref| (the reference backend's plain fp32 sums over rows that cancel; cpu_flash
// stays under 1.1e-6); the table allows 4x that. The cache's storage type adds nothing here.
#include "attn/types.hpp"

namespace attn::test {

/// |out - ref| <= atol + rtol * |ref| element-wise (absolute numbers for one case).
struct Tolerance {
  double atol = 0, rtol = 0;
};

struct ToleranceRule {
  double atol_of_max = 0;  // absolute part, as a fraction of max|ref| over the case
  double rtol = 0;         // relative part, of |ref| element-wise
  double atol_of_vmax = 0;  // absolute part, as a fraction of the largest |V| the cache stores

  /// The rule's numbers for a case whose largest reference output is `ref_max` = max|ref| and
  /// whose largest stored value is `v_max` (0 where the caller does not know it: a stricter bound).
  constexpr Tolerance scaled(double ref_max, double v_max = 0) const {
    return {atol_of_max * ref_max + atol_of_vmax * v_max, rtol};
  }
};

constexpr double kBf16Ulp = 1.0 / 128;   // 2^-7: one ulp at 1 (8 significant bits)
constexpr double kFp16Ulp = 1.0 / 1024;  // 2^-10: one ulp at 1 (11 significant bits)

constexpr ToleranceRule tolerance_rule(DType io, DType kv_storage) {
  switch (io) {
    case DType::float32:
      // 16-bit / fp8 caches: both sides read the same stored values, so the storage type adds
      // nothing; the error is fp32 arithmetic alone, the same as an fp32 cache.
      (void)kv_storage;
      return {1e-5, 2e-5};
    case DType::float16: return {kFp16Ulp / 4, kFp16Ulp};
    case DType::bfloat16: return {kBf16Ulp / 4, kBf16Ulp, kBf16Ulp / 4};
    default: return {0, 0};
  }
}

/// Two computations whose inputs are rounded to the I/O dtype at different points (MLA's expanded
/// form against its absorbed oracle: q·W_UK rounded to the layer dtype on one side only; an
/// fp8_ds_mla cache against the CLI's oracle, whose cache rounds the dequantized entries): two
/// I/O ulps of the largest value, not one rounding (measured on `attn run --model
/// deepseek-v2-lite --prompt-len 400`: 0.0056 against max|ref| ~1.8 in bf16, a fifth of this).
constexpr ToleranceRule reordered_rounding_rule(DType io) {
  const ToleranceRule r = tolerance_rule(io, io);
  return {2 * r.rtol, 2 * r.rtol};
}

}  // namespace attn::test
