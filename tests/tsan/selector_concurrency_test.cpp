// The selector under concurrent callers (run under ThreadSanitizer in CI: tests matching
// *Concurrency*): many threads select / explain overlapping configs while another thread clears
// the cache and registers backends; every thread must see the decision a single thread sees.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "attn/attn.hpp"
#include "selector/selector_test_util.hpp"

namespace {

using namespace attn;

struct Query {
  LayerConfig config;
  SelectOptions options;
};

// What must stay identical across threads. Candidate lists and "no valid backend" texts grow
// as backends are registered, so they are compared only up to the registry-independent part.
std::string outcome(const Query& q, bool use_explain) {
  try {
    const Decision d = use_explain ? explain(q.config, q.options) : select(q.config, q.options);
    return "backend=" + d.backend + " variant=" + d.variant + " forced_by=" + d.forced_by +
           " block_size=" + std::to_string(d.block_size) + " notes=" + std::to_string(d.notes.size());
  } catch (const Error& e) {
    const std::string msg = e.what();
    return "error: " + msg.substr(0, std::min(msg.find(" Reasons:"), msg.find(" Valid options are:")));
  }
}

// Every query selects from `reg` (the test's own registry, which the mutator adds to).
std::vector<Query> queries(const std::string& module_backend_head, test::TestRegistry& reg) {
  std::vector<Query> out;
  auto add = [&](auto mutate_config, auto mutate_options) {
    Query q;
    q.config.num_heads = 8;
    q.config.num_kv_heads = 2;
    q.options = reg.options();
    q.options.use_env = false;
    mutate_config(q.config);
    mutate_options(q.options);
    out.push_back(q);
  };
  auto none = [](auto&) {};
  for (int h : {64, 72, 80, 128, 256, 3})
    add([h](LayerConfig& c) { c.head_size = h; }, none);
  add([](LayerConfig& c) { c.dtype = DType::float32; c.sliding_window = 128; }, none);
  add([](LayerConfig& c) { c.has_sink = true; c.head_size = 64; }, none);
  add([](LayerConfig& c) { c.is_attention_free = true; }, none);
  add([](LayerConfig& c) { c.block_size = 7; }, none);
  add(none, [](SelectOptions& o) { o.backend = "reference"; });
  add(none, [](SelectOptions& o) { o.platform = parse_platform("cpu:avx2"); });
  add([](LayerConfig& c) { c.is_attention_free = true; }, [](SelectOptions& o) { o.platform = parse_platform("cuda:9.0"); });
  add([](LayerConfig& c) { c.kv_cache_dtype = KVCacheDType::nvfp4; c.use_mm_prefix = true; }, none);  // no valid backend
  add(none, [](SelectOptions& o) { o.backend = "no_such_backend"; });
  add([&](LayerConfig& c) { c.head_size = std::stoi(module_backend_head); c.dtype = DType::float32; }, none);  // module load race
  return out;
}

TEST(SelectorConcurrency, ThreadsAgreeWhileTheCacheIsClearedAndBackendsAreAdded) {
  // A backend whose module cannot load: many threads race to try loading it first.
  const int module_head = test::kSyntheticHeadBase + 950;
  test::TestRegistry reg;
  reg.add_synthetic("tsan_module", test::synthetic_caps(module_head), 1, "tsan_missing_module");
  const auto qs = queries(std::to_string(module_head), reg);

  clear_selector_cache();
  std::vector<std::string> expected;
  for (const Query& q : qs) expected.push_back(outcome(q, false));

  constexpr int kThreads = 8, kIterations = 150, kAdded = 12;
  std::atomic<bool> stop{false};
  std::atomic<int> mismatches{0};
  std::mutex first_mu;
  std::string first_mismatch;

  std::thread mutator([&] {
    // Registers backends no query can use (head size 1990 only): generations change, outcomes must not.
    for (int i = 0; !stop.load(); ++i) {
      clear_selector_cache();
      if (i % 8 == 0 && i / 8 < kAdded) reg.add_synthetic("tsan_added", test::synthetic_caps(test::kSyntheticHeadBase + 990), 1);
      (void)selector_cache_stats();
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t)
    workers.emplace_back([&, t] {
      for (int k = 0; k < kIterations; ++k) {
        const std::size_t i = std::size_t(t * 7 + k) % qs.size();
        const std::string got = outcome(qs[i], (t + k) % 2 == 0);
        if (got != expected[i]) {
          ++mismatches;
          std::lock_guard lock(first_mu);
          if (first_mismatch.empty()) first_mismatch = "query " + std::to_string(i) + ": " + got + " != " + expected[i];
        }
      }
    });
  for (auto& w : workers) w.join();
  stop = true;
  mutator.join();

  EXPECT_EQ(mismatches.load(), 0) << first_mismatch;
  // Decisions computed after the run are still the single-threaded ones.
  for (std::size_t i = 0; i < qs.size(); ++i) EXPECT_EQ(outcome(qs[i], false), expected[i]) << i;
}

TEST(SelectorConcurrency, ConcurrentFirstCallsOnAColdCacheAgree) {
  clear_selector_cache();
  LayerConfig c;
  c.head_size = 96;
  SelectOptions o;
  o.use_env = false;
  std::vector<std::string> got(8);
  std::vector<std::thread> ts;
  for (int t = 0; t < 8; ++t) ts.emplace_back([&, t] { got[std::size_t(t)] = select(c, o).to_json(); });
  for (auto& t : ts) t.join();
  for (auto& g : got) EXPECT_EQ(g, got[0]);
  const auto s = selector_cache_stats();
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.hits + s.misses, 8u);
}

}  // namespace
