// `attn bench`: cpu_flash on Llama-3.1-8B and gpt-oss-20b shapes (and a decode grid over head
// size and GQA), as fractions of this machine's own ceilings sampled next to each kernel run
// (read bandwidth for decode, matmul peak for prefill) and as speed-ups over `reference`; then
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

BenchCeilings measure_ceilings(int threads, bool quick, attn_bench::ReadStream& dram) {
  BenchCeilings c;
  c.llc = attn_bench::last_level_cache();
  c.pool = attn_bench::choose_pool(quick);
  c.threads = threads;
  c.reps = quick ? 3 : 7;
  c.cpu = attn_bench::cpu_identity().to_string();
  double load[1];
  if (getloadavg(load, 1) == 1) c.load_average = load[0];
  c.read_1t = attn_bench::read_bandwidth(1, c.pool.bytes, c.reps);
  c.read_all.instruction = dram.instruction();
  c.read_all.add(attn_bench::runs_after_warmup(c.reps, [&] { return dram.once(); }));
  c.read_write_all = attn_bench::read_write_bandwidth(threads, c.pool.bytes, c.reps);
  c.fp32_fma_1t = attn_bench::fp32_fma(1, c.reps);
  c.fp32_fma = attn_bench::fp32_fma(threads, c.reps);
  c.bf16_dot = attn_bench::bf16_dot(threads, c.reps);
  c.amx_bf16 = attn_bench::amx_bf16(threads, c.reps);
  return c;
}

/// Ceiling samples taken next to one shape's kernel runs (called before and after them), so both
/// see the same machine: two all-thread reads (decode) or two matmul-peak runs (prefill) per
/// call. They join the run's samples. A prefill on the amx variant runs its products on AMX
/// tiles: its peak is AMX's, not the best AVX-512 one.
void sample_adjacent(bool decode, bool amx, BenchCeilings& c, attn_bench::ReadStream& dram, std::vector<double>& adjacent) {
  std::vector<double> runs;
  if (decode) {
    for (int i = 0; i < 2; ++i) runs.push_back(dram.once());
    c.read_all.add(runs);
  } else if (amx) {
    if (c.amx_bf16.value <= 0) return;
    runs = attn_bench::amx_bf16(c.threads, 2).samples;
    c.amx_bf16.add(runs);
  } else {
    const bool dot = c.bf16_dot.value >= c.fp32_fma.value;
    attn_bench::Ceiling& peak = dot ? c.bf16_dot : c.fp32_fma;
    if (peak.value <= 0) return;
    runs = (dot ? attn_bench::bf16_dot(c.threads, 2) : attn_bench::fp32_fma(c.threads, 2)).samples;
    peak.add(runs);
  }
  adjacent.insert(adjacent.end(), runs.begin(), runs.end());
}

double median(std::vector<double> v) { return attn_bench::quantile(std::move(v), 0.5); }

BenchRow measure_shape(const Shape& s, BenchCeilings& c, attn_bench::ReadStream& dram, bool quick) {
  const int reps = quick ? 3 : 9;
  BenchRow r;
  r.name = s.name;
  r.kind = is_decode(s) ? "decode" : "prefill";
  double flash_s = 0;
  {
    attn_bench::Workload w(s, "cpu_flash", c.threads, c.pool.bytes);
    std::vector<double> adjacent;
    const bool amx = w.variant() == "amx";
    sample_adjacent(is_decode(s), amx, c, dram, adjacent);
    if (s.kv == attn::KVCacheDType::auto_) {
      flash_s = w.median_seconds(reps);
    } else {  // calls alternate with the bf16 cache's on the same shape: the ratio of each pair
      Shape sb = s;
      sb.kv = attn::KVCacheDType::auto_;
      attn_bench::Workload wb(sb, "cpu_flash", c.threads, c.pool.bytes);
      w.run_once(), wb.run_once();  // warm-up
      std::vector<double> t, ratio;
      for (int i = 0; i < reps; ++i) {
        t.push_back(w.run_once());
        ratio.push_back(t.back() / wb.run_once());
      }
      flash_s = median(t);
      r.vs_bf16 = median(ratio);
    }
    sample_adjacent(is_decode(s), amx, c, dram, adjacent);
    r.adjacent_ceiling = attn_bench::quantile(adjacent, 0.5);
    r.variant = w.variant();
    r.instances = w.instances();
    r.ms = flash_s * 1e3;
    r.figure = (is_decode(s) ? w.kv_bytes() : w.useful_flops()) / flash_s / 1e9;
    r.fraction = r.adjacent_ceiling > 0 ? r.figure / r.adjacent_ceiling : 0;
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

/// One result from several rounds: the ceilings over every sample of every round; each row's
/// numbers the median of its rounds (fractions were taken within each round, against the
/// samples adjacent to that kernel run); the load average the highest seen.
BenchResults merge_rounds(const std::vector<BenchResults>& rounds) {
  BenchResults out = rounds.front();
  BenchCeilings& c = out.ceilings;
  c.rounds = int(rounds.size());
  for (std::size_t k = 1; k < rounds.size(); ++k) {
    const BenchCeilings& r = rounds[k].ceilings;
    c.load_average = std::max(c.load_average, r.load_average);
    c.read_1t.add(r.read_1t.samples);
    c.read_all.add(r.read_all.samples);
    c.read_write_all.add(r.read_write_all.samples);
    c.fp32_fma_1t.add(r.fp32_fma_1t.samples);
    c.fp32_fma.add(r.fp32_fma.samples);
    c.bf16_dot.add(r.bf16_dot.samples);
    c.amx_bf16.add(r.amx_bf16.samples);
  }
  for (std::size_t i = 0; i < out.rows.size(); ++i) {
    BenchRow& row = out.rows[i];
    auto field = [&](auto get) {
      std::vector<double> v;
      for (const BenchResults& r : rounds) v.push_back(get(r.rows[i]));
      return median(v);
    };
    row.ms = field([](const BenchRow& x) { return x.ms; });
    row.figure = field([](const BenchRow& x) { return x.figure; });
    row.fraction = field([](const BenchRow& x) { return x.fraction; });
    row.adjacent_ceiling = field([](const BenchRow& x) { return x.adjacent_ceiling; });
    if (row.vs_reference) row.vs_reference = field([](const BenchRow& x) { return x.vs_reference.value_or(0); });
    if (row.vs_bf16) row.vs_bf16 = field([](const BenchRow& x) { return x.vs_bf16.value_or(0); });
  }
  // Against a quiet moment of the same machine: the 90th percentile of the whole run's samples.
  for (BenchRow& row : out.rows) {
    const double p90 = row.kind == "decode" ? c.read_all.p90 : row.variant == "amx" ? c.amx_bf16.p90 : c.matmul_peak_p90();
    row.fraction_p90 = p90 > 0 ? row.figure / p90 : 0;
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
  attn_bench::ReadStream dram(threads, attn_bench::choose_pool(o.quick).bytes);
  for (int round = 0; round < o.rounds; ++round) {
    log(o.rounds > 1 ? "round " + std::to_string(round + 1) + " of " + std::to_string(o.rounds) + ": measuring ceilings...\n"
                     : "measuring ceilings...\n");
    BenchResults& res = rounds.emplace_back();
    res.ceilings = measure_ceilings(threads, o.quick, dram);
    for (Shape s : bench_shapes(o.quick)) {
      if (!o.filter.empty() && s.name.find(o.filter) == std::string::npos) continue;
      if (o.kv_layout == "HND") s.layout = attn::KVLayout::HND;  // the row layout, for side-by-side runs
      log("  " + s.name + " ...");
      res.rows.push_back(measure_shape(s, res.ceilings, dram, o.quick));
      log(std::string(" ") + std::to_string(res.rows.back().ms) + " ms\n");
    }
  }
  BenchResults res = merge_rounds(rounds);
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
