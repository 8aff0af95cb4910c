// `attn bench` as a user runs it: the pool label, the ceilings with their instructions, the
// per-shape ratios and their keys, the CSV path check and the help text.
#include <gtest/gtest.h>
#include <unistd.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "testkit/bench_kit.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct BenchRun {
  int rc = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ostringstream s;
  s << std::ifstream(p).rdbuf();
  return s.str();
}

/// `attn bench <args>` with stdout and stderr each sent to a file in a fresh directory.
BenchRun bench(const std::string& args) {
  // Unique per process and call: ctest runs each test in its own process, in parallel.
  static int calls = 0;
  const fs::path dir = fs::temp_directory_path() / ("attn_bench_cli_" + std::to_string(getpid()) + "_" + std::to_string(calls++));
  fs::create_directories(dir);
  const std::string cmd = "ATTN_LOG=error '" + std::string(ATTN_CLI_PATH) + "' bench " + args + " >'" +
                          (dir / "out").string() + "' 2>'" + (dir / "err").string() + "'";
  const int status = std::system(cmd.c_str());
  BenchRun r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(dir / "out"), slurp(dir / "err")};
  fs::remove_all(dir);
  return r;
}

TEST(BenchCli, CsvToADirectoryIsAnErrorNamingThePath) {
  const fs::path dir = fs::temp_directory_path() / "attn_bench_csv_dir";
  fs::create_directories(dir);
  const BenchRun r = bench("--quick --filter no_such_shape --csv '" + dir.string() + "'");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.err.find(dir.string()), std::string::npos) << r.err;
  const BenchRun missing = bench("--quick --filter no_such_shape --csv /no/such/dir/figures.csv");
  EXPECT_NE(missing.rc, 0);
  EXPECT_NE(missing.err.find("/no/such/dir/figures.csv"), std::string::npos) << missing.err;
}

TEST(BenchCli, KvLayoutRunsTheShapesOnHndRowsAndRefusesOthers) {
  // --kv-layout HND: the attention shapes on row caches, for side-by-side runs with the default.
  const BenchRun r = bench("--quick --json --filter llama8b_decode_b1_ctx4096_bf16 --kv-layout HND");
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_GT(j.value("llama8b_decode_b1_ctx4096_bf16.ms", 0.0), 0.0) << r.out;
  const BenchRun bad = bench("--quick --filter no_such_shape --kv-layout MLA");
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE((bad.out + bad.err).find("--kv-layout"), std::string::npos) << bad.out << bad.err;
}

TEST(BenchCli, RoundsReportMediansAndSayHowMany) {
  // --rounds N measures ceilings and shapes N times; each shape's figure is the median of its
  // rounds, each ceiling's p50 / p90 taken over every sample of every round.
  const BenchRun r = bench("--quick --json --rounds 3 --filter llama8b_decode_b1_ctx4096_bf16");
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j.value("ceiling.rounds", 0), 3) << r.out;
  EXPECT_NE(j.value("ceiling.statistic", std::string()).find("of every run of 3 rounds"), std::string::npos) << r.out;
  EXPECT_EQ(j.value("ceiling.dram_read.samples", 0), 3 * (3 + 2 * 2)) << r.out;
  EXPECT_GT(j.value("llama8b_decode_b1_ctx4096_bf16.ms", 0.0), 0.0) << r.out;
  EXPECT_GT(j.value("llama8b_decode_b1_ctx4096_bf16.fraction_of_dram", 0.0), 0.0) << r.out;
  const BenchRun text = bench("--quick --rounds 2 --filter no_such_shape");
  ASSERT_EQ(text.rc, 0) << text.err;
  EXPECT_NE(text.out.find("of every run of 2 rounds"), std::string::npos) << text.out;
  const BenchRun bad = bench("--quick --rounds 0 --filter no_such_shape");
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE((bad.out + bad.err).find("--rounds"), std::string::npos) << bad.out << bad.err;
}

TEST(BenchCli, HelpDescribesTheShapes) {
  const BenchRun r = bench("--help");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("Llama-3.1-8B"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gpt-oss-20b"), std::string::npos) << r.out;
  std::string lower = r.out;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  EXPECT_EQ(lower.find("issue"), std::string::npos) << r.out;
  EXPECT_EQ(lower.find("ticket"), std::string::npos) << r.out;
}

TEST(BenchCli, TableNamesThePoolAndEachCeilingsInstruction) {
  const BenchRun r = bench("--quick --filter no_such_shape");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("LLC "), std::string::npos) << r.out;
  EXPECT_TRUE(r.out.find("are DRAM figures") != std::string::npos || r.out.find("are CACHE figures") != std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("read, 1 thread"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fp32 FMA"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("AMX bf16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cpu: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("p90"), std::string::npos) << r.out;
}

TEST(BenchCli, QuickJsonCarriesPoolCeilingsAndRatios) {
  const fs::path csv = fs::temp_directory_path() / "attn_bench_cli_figures.csv";
  const BenchRun r = bench("--quick --filter llama8b --json --csv '" + csv.string() + "'");
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  // The label follows the pool rule (attn_bench::dram_pool_min): DRAM only when the rotation
  // spans it for a known LLC.
  const auto pool = j["ceiling.pool_bytes"].get<std::size_t>(), llc = j["ceiling.llc_bytes"].get<std::size_t>();
  EXPECT_EQ(j["ceiling.pool"], llc > 0 && pool >= attn_bench::dram_pool_min(llc) ? "dram" : "cache") << j.dump();
  const double dram = j["ceiling.dram_read_gbs"].get<double>();
  EXPECT_GT(dram, 0.0);
  EXPECT_GT(j["ceiling.dram_read_1thread_gbs"].get<double>(), 0.0);
  for (const char* c : {"dram_read_1thread", "dram_read", "fp32_fma_1thread", "fp32_fma", "bf16_dot", "amx_bf16"}) {
    const std::string k = std::string("ceiling.") + c;
    EXPECT_FALSE(j[k + "_instruction"].get<std::string>().empty()) << c;
    EXPECT_GE(j[k + ".p90"].get<double>(), j[k + ".p50"].get<double>()) << c;
  }
  // Two all-thread reads before and two after each decode shape (bf16 and every quantized cache)
  // join the start's samples.
  const std::vector<std::string> quantized = {"fp8", "int8_per_token_head", "fp8_per_token_head", "int4_per_token_head",
                                              "nvfp4", "nvfp4_4over6", "turboquant_k8v4", "turboquant_4bit_nc",
                                              "turboquant_k3v4_nc", "turboquant_3bit_nc"};
  EXPECT_EQ(j["ceiling.dram_read.samples"].get<int>(), 3 + 2 * 2 * int(1 + quantized.size()));
  EXPECT_EQ(j["ceiling.dram_read.p50"].get<double>(), dram);
  EXPECT_FALSE(j["ceiling.cpu"].get<std::string>().empty());
  const double scaling = j["ceiling.core_scaling"].get<double>();
  EXPECT_GT(scaling, 0.0);
  EXPECT_EQ(j["ceiling.cores_shared"].get<bool>(), j["threads"].get<int>() > 1 && scaling < 0.85);
  const double peak = std::max(j["ceiling.fp32_fma_gflops"].get<double>(), j["ceiling.bf16_dot_gflops"].get<double>());
  EXPECT_DOUBLE_EQ(j["ceiling.matmul_peak_gflops"].get<double>(), peak);

  const std::string base = "llama8b_decode_b1_ctx4096", bf16 = base + "_bf16";
  std::vector<std::string> shapes = {bf16};
  for (const std::string& dt : quantized) shapes.push_back(base + "_" + dt);
  for (const std::string& s : shapes) {
    SCOPED_TRACE(s);
    EXPECT_EQ(j[s + ".pool"], j["ceiling.pool"]);
    EXPECT_GE(j[s + ".instances"].get<int>(), 2);  // a call never re-reads the previous call's KV
    // Against the reads beside this shape's runs, and against the run's quiet (p90) read.
    EXPECT_NEAR(j[s + ".fraction_of_dram"].get<double>(),
                j[s + ".kv_gbs"].get<double>() / j[s + ".adjacent_dram_gbs"].get<double>(), 1e-9);
    EXPECT_NEAR(j[s + ".fraction_of_dram_p90"].get<double>(),
                j[s + ".kv_gbs"].get<double>() / j["ceiling.dram_read.p90"].get<double>(), 1e-9);
  }
  // Each ratio comes from calls alternating with the bf16 cache's (not the two rows' medians,
  // taken minutes apart): a positive, finite time ratio.
  for (const std::string& dt : quantized) {
    const double ratio = j[base + "." + dt + "_vs_bf16"].get<double>();
    EXPECT_GT(ratio, 0.0) << dt;
    EXPECT_TRUE(std::isfinite(ratio)) << dt;
  }
  const std::string prefill = "llama8b_prefill_512_bf16";
  // The amx variant's products run on AMX tiles: its peak is AMX's (not measured by a build
  // without the AMX ceiling, as a sanitizer tree: then no fraction).
  const bool amx = j[prefill + ".variant"].get<std::string>() == "amx";
  if ((amx ? j["ceiling.amx_bf16.p50"].get<double>() : peak) > 0) {
    EXPECT_NEAR(j[prefill + ".fraction_of_matmul_peak"].get<double>(),
                j[prefill + ".gflops"].get<double>() / j[prefill + ".adjacent_matmul_peak_gflops"].get<double>(), 1e-9);
    EXPECT_NEAR(j[prefill + ".fraction_of_matmul_peak_p90"].get<double>(),
                j[prefill + ".gflops"].get<double>() / j[amx ? "ceiling.amx_bf16.p90" : "ceiling.matmul_peak.p90"].get<double>(), 1e-9);
  }

  const std::string table = slurp(csv);
  fs::remove(csv);
  EXPECT_EQ(table.rfind("name,value\n", 0), 0u) << table;
  EXPECT_NE(table.find("ceiling.pool,"), std::string::npos) << table;
  EXPECT_NE(table.find(bf16 + ".fraction_of_dram_p90,"), std::string::npos) << table;
}

TEST(BenchCli, StepOverheadFiguresAreConsistent) {
  const BenchRun r = bench("--quick --filter step --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  for (const std::string shape : {"step_llama8b_32layers_decode_b64_ctx32", "step_llama8b_32layers_decode_b8_ctx4096"}) {
    SCOPED_TRACE(shape);
    const double fwd = j[shape + ".forward_ms"].get<double>() * 1e-3, planned = j[shape + ".planned_ms"].get<double>() * 1e-3;
    const double plan = j[shape + ".plan_us"].get<double>() * 1e-6;
    ASSERT_GT(fwd, 0.0);
    ASSERT_GT(planned, 0.0);
    ASSERT_GT(plan, 0.0);
    EXPECT_NEAR(j[shape + ".forward_outside_kernels_fraction"].get<double>(), 32 * plan / fwd, 1e-9);
    EXPECT_NEAR(j[shape + ".planned_outside_kernels_fraction"].get<double>(), plan / planned, 1e-9);
    EXPECT_NEAR(j[shape + ".planned_speedup"].get<double>(), fwd / planned, 1e-9);
  }
  EXPECT_FALSE(j.contains("llama8b_decode_b1_ctx4096_bf16.ms")) << "the filter keeps only the step figures";
}

}  // namespace
