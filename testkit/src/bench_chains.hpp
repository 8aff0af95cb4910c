#pragma once
// A compute ceiling's loop: N independent accumulator chains stepped `iters` times. Each chain
// stays in its own register (the unroll pragma), and the folded result is handed to an empty
// asm so no round can be optimized away.
namespace attn_bench {

template <int N, class V, class Init, class Step, class Add>
inline void run_chains(long iters, Init init, Step step, Add add) {
  V a[N];
  for (int i = 0; i < N; ++i) a[i] = init(i);
  for (long it = 0; it < iters; ++it)
#pragma GCC unroll 32
    for (int i = 0; i < N; ++i) a[i] = step(a[i]);
  for (int i = 1; i < N; ++i) a[0] = add(a[0], a[i]);
  asm volatile("" : : "v"(a[0]));
}

}  // namespace attn_bench
