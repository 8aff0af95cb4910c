// `attn bench`: cpu_flash on Llama-3.1-8B and gpt-oss-20b shapes (and a decode grid over head
// size and GQA), as fractions of this machine's own measured ceilings (read bandwidth, matmul
// peak, the paged read of each decode call's own KV) and as speed-ups over `reference`; then
// the MLA / sparse and mixer figure sets against the read bandwidth measured in the same run.
#include "attn/limits.hpp"
#include "bench.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <vector>

#include "attn/error.hpp"
#include "bench_report.hpp"
#include "bench_shapes.hpp"

namespace attn_cli {
namespace {

using attn_bench::Shape;

BenchCeilings measure_ceilings(int threads, bool quick) {
  BenchCeilings c;
  c.llc = attn_bench::last_level_cache();
  c.pool = attn_bench::choose_pool(quick);
  c.threads = threads;
  c.reps = quick ? 3 : 7;
  double load[1];
  if (getloadavg(load, 1) == 1) c.load_average = load[0];
  c.read_1t = attn_bench::read_bandwidth(1, c.pool.bytes, c.reps);
  c.read_all = attn_bench::read_bandwidth(threads, c.pool.bytes, c.reps);
  c.read_write_all = attn_bench::read_write_bandwidth(threads, c.pool.bytes, c.reps);
  c.fp32_fma = attn_bench::fp32_fma(threads, c.reps);
  c.bf16_dot = attn_bench::bf16_dot(threads, c.reps);
  c.amx_bf16 = attn_bench::amx_bf16(threads, c.reps);
  return c;
}

BenchRow measure_shape(const Shape& s, const BenchCeilings& c, bool quick) {
  const int reps = quick ? 3 : 9;
  BenchRow r;
  r.name = s.name;
  r.kind = is_decode(s) ? "decode" : "prefill";
  double flash_s = 0;
  {
    attn_bench::Workload w(s, "cpu_flash", c.threads, c.pool.bytes);
    flash_s = w.median_seconds(reps);
    r.variant = w.variant();
    r.instances = w.instances();
    r.ms = flash_s * 1e3;
    if (is_decode(s)) {
      r.figure = w.kv_bytes() / flash_s / 1e9;
      r.fraction = r.figure / c.read_all.value;
      const double read_s = w.paged_read_median_seconds(reps);
      r.paged_read_gbs = w.kv_bytes() / read_s / 1e9;
      r.fraction_of_paged_read = read_s / flash_s;
    } else {
      r.figure = w.useful_flops() / flash_s / 1e9;
      r.fraction = c.matmul_peak() > 0 ? r.figure / c.matmul_peak() : 0;
    }
  }
  // The reference is plain loops: one call on the same shape when it is affordable.
  const bool affordable = (is_decode(s) && double(s.batch) * s.context <= (quick ? 4096 : 16384)) ||
                          (!is_decode(s) && s.query_len <= 512) || (s.window > 0 && is_decode(s));
  if (affordable) {
    attn_bench::Workload ref(s, "reference", c.threads, 0);
    ref.run_once();
    r.vs_reference = ref.run_once() / flash_s;
  }
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// One result from several rounds: each number the median of its rounds (fractions were taken
/// within each round, against that round's ceilings); the load average the highest seen.
BenchResults median_of_rounds(const std::vector<BenchResults>& rounds) {
  BenchResults out = rounds.front();
  auto med = [&](auto get) {
    std::vector<double> v;
    for (const BenchResults& r : rounds) v.push_back(get(r));
    return median(v);
  };
  BenchCeilings& c = out.ceilings;
  c.rounds = int(rounds.size());
  for (const BenchResults& r : rounds) c.load_average = std::max(c.load_average, r.ceilings.load_average);
  c.read_1t.value = med([](const BenchResults& r) { return r.ceilings.read_1t.value; });
  c.read_all.value = med([](const BenchResults& r) { return r.ceilings.read_all.value; });
  c.read_write_all.value = med([](const BenchResults& r) { return r.ceilings.read_write_all.value; });
  c.fp32_fma.value = med([](const BenchResults& r) { return r.ceilings.fp32_fma.value; });
  c.bf16_dot.value = med([](const BenchResults& r) { return r.ceilings.bf16_dot.value; });
  c.amx_bf16.value = med([](const BenchResults& r) { return r.ceilings.amx_bf16.value; });
  for (std::size_t i = 0; i < out.rows.size(); ++i) {
    BenchRow& row = out.rows[i];
    auto field = [&](auto get) { return med([&](const BenchResults& r) { return get(r.rows[i]); }); };
    row.ms = field([](const BenchRow& x) { return x.ms; });
    row.figure = field([](const BenchRow& x) { return x.figure; });
    row.fraction = field([](const BenchRow& x) { return x.fraction; });
    if (row.paged_read_gbs) row.paged_read_gbs = field([](const BenchRow& x) { return x.paged_read_gbs.value_or(0); });
    if (row.fraction_of_paged_read)
      row.fraction_of_paged_read = field([](const BenchRow& x) { return x.fraction_of_paged_read.value_or(0); });
    if (row.vs_reference) row.vs_reference = field([](const BenchRow& x) { return x.vs_reference.value_or(0); });
  }
  return out;
}

}  // namespace

int run_bench(const BenchOptions& o) {
  // Opened first, so a path that cannot be written fails now rather than after the whole run.
  std::ofstream csv;
  if (!o.csv_path.empty()) {
    csv.open(o.csv_path);
    if (!csv) throw attn::Error("--csv " + o.csv_path + ": cannot open for writing (a directory, or not writable)");
  }
  if (o.threads > 0) omp_set_num_threads(o.threads);  // the mixer figures run on the default team
  const int threads = attn::team_size(o.threads);
  auto log = [&](const std::string& s) {
    if (!o.json) std::cerr << s << std::flush;
  };

  // Rounds one after the other, each with its own ceilings: a machine whose bandwidth drifts
  // (shared hosts) moves a round's ceilings and shapes together, so within-round fractions hold.
  std::vector<BenchResults> rounds;
  for (int round = 0; round < o.rounds; ++round) {
    log(o.rounds > 1 ? "round " + std::to_string(round + 1) + " of " + std::to_string(o.rounds) + ": measuring ceilings...\n"
                     : "measuring ceilings...\n");
    BenchResults& res = rounds.emplace_back();
    res.ceilings = measure_ceilings(threads, o.quick);
    for (Shape s : bench_shapes(o.quick)) {
      if (!o.filter.empty() && s.name.find(o.filter) == std::string::npos) continue;
      if (o.kv_layout == "HND") s.layout = attn::KVLayout::HND;  // the row layout, for side-by-side runs
      log("  " + s.name + " ...");
      res.rows.push_back(measure_shape(s, res.ceilings, o.quick));
      log(std::string(" ") + std::to_string(res.rows.back().ms) + " ms\n");
    }
  }
  BenchResults res = median_of_rounds(rounds);
  res.sets = run_figure_sets(o.filter, o.quick, res.ceilings.read_all.value, res.ceilings.read_write_all.value, threads,
                             [&](const std::string& name) { log("  " + name + " figures ...\n"); });

  const nlohmann::ordered_json j = bench_json(res);
  if (o.json)
    std::cout << j.dump(2) << "\n";
  else
    print_bench_table(res);
  if (csv.is_open()) {
    csv << "name,value\n";
    for (auto it = j.begin(); it != j.end(); ++it) csv << it.key() << "," << it.value().dump() << "\n";
    csv.close();
    if (!csv) throw attn::Error("--csv " + o.csv_path + ": write failed");
  }
  return 0;
}

}  // namespace attn_cli
