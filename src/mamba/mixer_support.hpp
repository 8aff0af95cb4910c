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

namespace attn::mixer {

// exp(x) for x <= ~0 (decays) and moderate positives, branch-free so loops over it vectorize:
// Cephes-style range reduction x = n·ln2 + r, degree-6 polynomial; relative error ~2e-7.
static inline float vexp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float n = std::nearbyint(x * 1.44269504088896341f);
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

/// "avx512" when this CPU runs the AVX-512 kernel builds, else "generic".
std::string isa_for(const Platform& p);
bool use_avx512();

/// float32, contiguous, exact extents; `name` is the argument named in the error.
void check_input(const TensorView& t, const char* name, std::initializer_list<int64_t> extents);

int omp_threads();

/// Runs task(i) for i in [0, n) over OpenMP threads (dynamic: sequences differ in length).
template <typename F>
void parallel_tasks(int64_t n, int num_threads, F&& task) {
  if (n <= 0) return;
#pragma omp parallel for schedule(dynamic, 1) num_threads(num_threads > 0 ? num_threads : omp_threads())
  for (int64_t i = 0; i < n; ++i) task(i);
}

/// Descriptor variant hook shared by the backends.
std::string descriptor_variant(const Platform& p);

}  // namespace attn::mixer

namespace attn::mixer {

/// Runs scan(t0, len, head, state_block, scratch) for every (sequence, head) of the batch that has
/// tokens, over OpenMP threads. The head's state block (`block_floats` floats at head·block_floats
/// in the sequence's slot) is zeroed first for sequences without an initial state; `scratch`
/// holds scratch_floats(len) floats private to the task.
template <typename Scratch, typename Scan>
void for_each_seq_head(const MixerBatch& md, MambaStateCache& state, int64_t heads, int64_t block_floats, int threads,
                       Scratch&& scratch_floats, Scan&& scan) {
  parallel_tasks(int64_t(md.num_seqs) * heads, threads, [&](int64_t task) {
    const int s = int(task / heads);
    const int64_t h = task % heads, len = md.query_len(s);
    if (len == 0) return;
    float* S = state.ssm_slot(md.state_slots[s]) + h * block_floats;
    if (!md.has_initial_state[s]) std::fill(S, S + block_floats, 0.0f);
    std::vector<float> scratch(std::size_t(scratch_floats(len)));
    scan(md.query_start_loc[s], len, h, S, scratch.data());
  });
}

/// The descriptor of a built-in mixer whose implementation is `Impl(const MixerParams&)`.
template <typename Impl>
MixerDescriptor make_descriptor(std::string name, std::string summary, MambaType type) {
  MixerDescriptor d;
  d.name = std::move(name);
  d.summary = std::move(summary);
  d.types = {type};
  d.variant = descriptor_variant;
  d.create = [](const MixerParams& p) -> std::unique_ptr<MixerImpl> { return std::make_unique<Impl>(p); };
  return d;
}

}  // namespace attn::mixer
