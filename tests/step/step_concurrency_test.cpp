// run() is const and keeps no state: two threads running two layers under one plan (and two
// threads running one layer) get, on every iteration, the bits one thread gets. Runs under
// ThreadSanitizer in scripts/test.sh (tests matching *Concurrency*).
//
// libgomp is not built with ThreadSanitizer, so its barriers look like races to it; under TSan
// the kernels run with num_threads=1 (an OpenMP team of one: no worker threads), which leaves
// exactly the concurrency under test, two application threads in one run() each.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "step/step_fixture.hpp"

#if defined(__SANITIZE_THREAD__)
#define ATTN_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ATTN_UNDER_TSAN 1
#endif
#endif

namespace attn::test {
namespace {

#ifdef ATTN_UNDER_TSAN
constexpr int kKernelThreads = 1, kIterations = 10;
#else
constexpr int kKernelThreads = 2, kIterations = 40;
#endif

/// Runs `body(t)` on two threads at once (started together) and returns the mismatches counted.
template <class Body>
int on_two_threads(Body body) {
  std::atomic<int> ready{0}, mismatches{0};
  auto thread = [&](int t) {
    ready.fetch_add(1);
    while (ready.load() < 2) std::this_thread::yield();
    mismatches.fetch_add(body(t));
  };
  std::thread a(thread, 0), b(thread, 1);
  a.join();
  b.join();
  return mismatches.load();
}

class StepPlanConcurrency : public ::testing::TestWithParam<std::string> {};

TEST_P(StepPlanConcurrency, TwoThreadsTwoLayersOnePlan) {
  Case l[2] = {make_case(step_layer_spec(0, kKernelThreads), GetParam()),
               make_case(step_layer_spec(1, kKernelThreads), GetParam())};
  run_forward(l[0]);
  run_forward(l[1]);
  const Buffer want[2] = {copy_of(l[0].out), copy_of(l[1].out)};
  const auto plan = l[0].impl->plan(l[0].md, l[0].cache->spec());
  const int bad = on_two_threads([&](int t) {
    Workspace ws(plan->workspace_bytes());  // one per thread
    Buffer out(l[t].out.dtype(), l[t].out.shape());
    int miss = 0;
    for (int i = 0; i < kIterations; ++i) {
      l[t].impl->run(*plan, args_for(l[t], out, &ws));
      miss += !same_bits(out, want[t]);
    }
    return miss;
  });
  EXPECT_EQ(bad, 0) << "of " << 2 * kIterations << " runs differed from the serial result; " << l[0].spec.describe();
}

TEST_P(StepPlanConcurrency, TwoThreadsOneLayerOnePlan) {
  Case l = make_case(step_layer_spec(0, kKernelThreads), GetParam());
  run_forward(l);
  const Buffer want = copy_of(l.out);
  const auto plan = l.impl->plan(l.md, l.cache->spec());
  const int bad = on_two_threads([&](int) {
    Buffer out(l.out.dtype(), l.out.shape());
    int miss = 0;
    for (int i = 0; i < kIterations; ++i) {
      l.impl->run(*plan, args_for(l, out, nullptr));  // each run its own scratch
      miss += !same_bits(out, want);
    }
    return miss;
  });
  EXPECT_EQ(bad, 0) << "of " << 2 * kIterations << " runs differed from the serial result; " << l.spec.describe();
}

INSTANTIATE_TEST_SUITE_P(Backends, StepPlanConcurrency, ::testing::Values("cpu_flash", "reference"));

}  // namespace
}  // namespace attn::test
