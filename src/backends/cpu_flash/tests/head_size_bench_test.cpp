// Head sizes that end in a partial vector against their whole-vector neighbours: 96, 100 and 104
// on decode and prefill steps of a Llama-like layer, one thread, in thread CPU time. Each round
// runs every (head size, variant) once, so drift on a shared machine hits all alike; medians
// per row, and ns per (query head x key x dimension) so the sizes compare directly. Each timed
// output is also checked against the fp64 reference. Skipped unless ATTN_HEAD_SIZE_BENCH=1:
//   ATTN_HEAD_SIZE_BENCH=1 build/tests/attn_tests --gtest_filter='CpuFlashHeadSizeBench.*'
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "attn/registry.hpp"
#include "backends/cpu_flash/tests/cpu_flash_test_util.hpp"
#include "support/test_support.hpp"

namespace attn::cpu_flash::test {
namespace {

using attn::test::Case;
using attn::test::CaseSpec;

double thread_cpu_ms() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return 1e3 * double(t.tv_sec) + 1e-6 * double(t.tv_nsec);
}

struct Row {
  std::string name;
  int d = 0;
  double elements = 0;  // query heads x visible keys x d
  Case c;
  std::unique_ptr<AttentionImpl> impl;
  std::vector<double> ms;
};

TEST(CpuFlashHeadSizeBench, TailSizesAgainstWholeVectorSizes) {
  const char* on = std::getenv("ATTN_HEAD_SIZE_BENCH");
  if (!on || std::string(on) != "1") GTEST_SKIP() << "set ATTN_HEAD_SIZE_BENCH=1 to run";
  const int reps = std::getenv("ATTN_HEAD_SIZE_BENCH_REPS") ? std::atoi(std::getenv("ATTN_HEAD_SIZE_BENCH_REPS")) : 7;
  omp_set_num_threads(1);
  struct Step {
    const char* name;
    std::vector<attn::test::SeqShape> seqs;
    double pairs;  // (query, visible key) pairs per query head
  };
  const Step steps[] = {{"decode 4 x ctx 2048", {{2047, 1}, {2047, 1}, {2047, 1}, {2047, 1}}, 4.0 * 2048},
                        {"prefill 384 causal", {{0, 384}}, 384.0 * 385 / 2}};
  std::vector<Isa> isas = {best_isa(detect_cpu())};
  if (isas[0] > Isa::avx2) isas.push_back(Isa::avx2);
  for (const Step& st : steps) {
    std::vector<Row> rows;
    for (Isa isa : isas)
      for (int d : {96, 100, 104}) {
        Row r;
        r.name = std::string(to_string(isa)) + " head " + std::to_string(d);
        r.d = d;
        CaseSpec spec;
        spec.config.num_heads = 32, spec.config.num_kv_heads = 8, spec.config.head_size = d;
        spec.config.dtype = DType::bfloat16;
        spec.seqs = st.seqs;
        spec.block_size = 64;
        spec.seed = 1;
        r.c = attn::test::make_case(spec, "cpu_flash");
        r.c.params.num_threads = 1;
        ForceIsa force(isa);
        r.impl = Registry::instance().create("cpu_flash", r.c.params);
        r.elements = 32.0 * st.pairs * d;
        rows.push_back(std::move(r));
      }
    for (int rep = -1; rep < reps; ++rep)  // rep −1 warms up
      for (Row& r : rows) {
        const double t0 = thread_cpu_ms();
        r.impl->forward(r.c.q.view(), *r.c.cache, r.c.md, r.c.out.view());
        const double t1 = thread_cpu_ms();
        if (rep >= 0) r.ms.push_back(t1 - t0);
      }
    std::printf("\n%s, 32 heads / 8 KV heads, bf16, 1 thread, %d rounds (thread CPU time, medians)\n", st.name, reps);
    std::printf("  %-24s %9s %16s\n", "variant", "cpu ms", "ps per head·key·dim");
    for (Row& r : rows) {
      std::sort(r.ms.begin(), r.ms.end());
      const double ms = r.ms[r.ms.size() / 2];
      std::printf("  %-24s %9.3f %16.2f\n", r.name.c_str(), ms, ms * 1e9 / r.elements);
      const auto check = attn::test::compare_output(r.c, attn::test::reference_attention(r.c));
      EXPECT_TRUE(check.ok) << r.name << ": " << check.message;
    }
  }
}

}  // namespace
}  // namespace attn::cpu_flash::test
