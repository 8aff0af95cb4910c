#pragma once
// Internal helpers shared by the mixer backends: scalar math (static inline, so the per-ISA
// kernel files each get their own copy and no AVX-512 code leaks into the portable build
// through the linker), run-time ISA choice, input checks and the OpenMP task loop.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "attn/mamba.hpp"
#include "cpu/threads.hpp"

namespace attn::mixer {

// exp(x) for x <= ~0 (decays) and moderate positives, branch-free so loops over it vectorize:
// Cephes-style range reduction x = n·ln2 + r, degree-6 polynomial; relative error ~2e-7.
// n = round(x·log2 e) by adding and removing 1.5·2^23 (exact for |x·log2 e| < 2^22, and the same
// round-to-nearest-even as nearbyint): plain adds vectorize on every ISA, while nearbyint needs
// SSE4.1 and became one libm call per element in the portable builds (the conv's SiLU included).
static inline float vexp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  constexpr float kRound = 12582912.0f;  // 1.5·2^23
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = (int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}

// log(1 + u) for u in [0, 1] as 2·atanh(u / (2 + u)): s <= 1/3, so the odd series to s^13 is
// good to ~1e-8 relative, and tiny u loses nothing (no 1 + u rounding). No libm call.
static inline float vlog1p_unit(float u) {
  const float s = u / (2.0f + u), s2 = s * s;
  float p = 1.0f / 13.0f;
  p = p * s2 + 1.0f / 11.0f;
  p = p * s2 + 1.0f / 9.0f;
  p = p * s2 + 1.0f / 7.0f;
  p = p * s2 + 1.0f / 5.0f;
  p = p * s2 + 1.0f / 3.0f;
  p = p * s2 + 1.0f;
  return 2.0f * s * p;
}

// vLLM / Mamba softplus: identity above 20 (where log1p(exp(x)) == x in float); else the
// overflow-free max(x, 0) + log1p(exp(-|x|)). Inline and branch-free: it runs once per
// (token, channel) in the Mamba-1 scan, where a libm call would cost more than the state update.
static inline float softplus(float x) {
  const float m = x > 0.0f ? x : 0.0f;
  const float r = m + vlog1p_unit(vexp(-std::fabs(x)));
  return x > 20.0f ? x : r;
}
static inline float sigmoid(float x) { return 1.0f / (1.0f + vexp(-x)); }
static inline float silu(float x) { return x * sigmoid(x); }

/// The kernel build a mixer (scan and conv) created now on platform `p` runs, from the CPU
/// layer's builds (src/cpu/isa.hpp): "avx512" when `p` runs it, else "generic"; ATTN_CPU_ISA
/// forces one (avx512_bf16 or amx run avx512, avx2 runs generic), so the portable kernels are
/// tested on an AVX-512 machine too.
std::string chosen_isa(const Platform& p);

/// float32, contiguous, exact extents; `name` is the argument named in the error.
void check_input(const TensorView& t, const char* name, std::initializer_list<int64_t> extents);
/// The same for a [tokens, shape...] tensor.
void check_input(const TensorView& t, const char* name, int64_t tokens, const MixerShape& shape);

/// Runs task(i) for i in [0, n) over OpenMP threads (dynamic: sequences differ in length).
template <typename F>
void parallel_tasks(int64_t n, int num_threads, F&& task) {
  if (n <= 0) return;
#pragma omp parallel for schedule(dynamic, 1) num_threads(cpu::team_size(num_threads))
  for (int64_t i = 0; i < n; ++i) task(i);
}

/// Descriptor variant hook shared by the backends.
std::string descriptor_variant(const Platform& p);

}  // namespace attn::mixer

namespace attn::mixer {

/// Tokens per conv task: token ranges are independent (a token's taps read inputs, never
/// outputs), so a long prefill splits over all threads whatever its width.
inline constexpr int64_t kConvTokens = 32;

/// Runs scan(t0, len, h0, h1, state, scratch) for every (sequence, block of plan.head_block
/// consecutive heads) of the planned batch that has tokens, over the plan's threads. `state` is
/// head h0's block of `head_floats` floats in the sequence's slot (heads h0..h1-1 follow it),
/// zeroed first for sequences without an initial state; `scratch` is the thread's block of the
/// run's workspace (plan.scratch_floats floats).
template <typename Scratch, typename Scan>
void for_each_seq_heads(const MixerPlan& plan, MambaStateCache& state, int64_t heads, int64_t head_floats,
                        const Scratch& scratch, Scan&& scan) {
  const MixerBatch& md = plan.batch;
  const int64_t block = plan.head_block, blocks = (heads + block - 1) / block;
  parallel_tasks(int64_t(md.num_seqs) * blocks, plan.threads, [&](int64_t task) {
    const int s = int(task / blocks);
    const int64_t h0 = task % blocks * block, h1 = std::min(heads, h0 + block), len = md.query_len(s);
    if (len == 0) return;
    float* S = state.ssm_slot(md.state_slots[s]) + h0 * head_floats;
    if (!md.has_initial_state[s]) std::fill(S, S + (h1 - h0) * head_floats, 0.0f);
    scan(md.query_start_loc[s], len, h0, h1, S, scratch.mine());
  });
}

/// Heads per task for mixers whose heads share per-chunk work in groups of `group` consecutive
/// heads: the largest divisor of `group` (so a task never straddles two groups) that is at most
/// `cap` and still leaves every thread about four of the `seq_heads` (sequences × heads) / block
/// tasks, for dynamic balancing.
inline int64_t shared_head_block(int64_t group, int64_t cap, int64_t seq_heads, int threads) {
  const int64_t t = cpu::team_size(threads);
  const int64_t want = std::clamp<int64_t>(seq_heads / (4 * t), 1, cap);
  int64_t best = 1;
  for (int64_t b = 1; b <= want; ++b)
    if (group % b == 0) best = b;
  return best;
}

/// The descriptor of a built-in mixer whose implementation is `Impl(const MixerParams&)`.
template <typename Impl>
MixerDescriptor make_descriptor(std::string name, std::string summary, MambaType type) {
  MixerDescriptor d;
  d.name = std::move(name);
  d.summary = std::move(summary);
  d.caps.types = {type};
  d.variant = descriptor_variant;
  d.create = [](const MixerParams& p) -> std::unique_ptr<MixerImpl> { return std::make_unique<Impl>(p); };
  return d;
}

}  // namespace attn::mixer
