// attn_decode_stages: where cpu_flash decode time goes, stage by stage, on the Llama-3.1-8B
// decode shape (32 q / 8 KV heads, head 128, the backend's preferred block size; HND rows and
// HND_PAIRS side by side), over the
// same rotated pool as `attn bench` (attn_bench::choose_pool, so every figure is a DRAM figure)
// and the same work items (sequence, KV head, 1024-key split; largest first, dynamic schedule):
//   read_hw  pure read of every K and V line in the cache's block order, hardware prefetch only
//   read     the same read walked the way the kernel walks it (chunks of ≤32 keys of one block)
//            with the kernel's software prefetch of the next chunk
//   convert  read + e4m3 → bf16 of K and V in registers, as the kernel widens (fp8 caches only)
//   qk       read (+ convert) + the kernel's Q·Kᵀ tiles (vdpbf16ps, 4 rows of the GQA group);
//            V read (+ converted); no softmax, no P·V
//   kernel   the full forward call (cpu_flash, the variant the dispatcher picks); with --kernel
//            alone, also on every quantized cache format (kKernelDtypes, each on the layout the
//            backend gives it): with --cache, each format's compute side per key
// On HND_PAIRS the read and qk stages walk the pair kernel's chunks (run_stage_pairs).
// Each stage on 1 thread and on all threads, as GB/s of KV bytes and as a fraction of the
// streaming-read ceiling on the same threads. The stage loops are the kernel's own pieces
// (decode_impl.hpp compiled here with the kernel's flags). Stages are interleaved per repetition
// and reported as medians. docs/decode-model.md explains the figures.
//
//   attn_decode_stages [--reps N] [--all] [--cache [--context N]] [--block-size N] [--kernel] [--threads N] [--filter S] [--pf HINT:AHEAD]
// --block-size N: cache blocks of N keys instead of the backend's preferred size.
// --pf HINT:AHEAD: the read/convert/qk stages' software prefetch: 0 none, 1 T0, 2 T1 (the
// kernel's), 3 T2, 4 NTA; chunks ahead (the kernel's: 1).
// The header also prints one core's vdpbf16ps rate and the dot-product bound it sets.
// --cache: one instance of B=1 × N keys (default 2048) read again and again: cache figures,
// the compute side of each stage (N = 128 keeps it in L2).
// One-thread figures are the calling thread's CPU time (robust on a shared machine); figures on
// all threads are wall time.
#define ATTN_CF_NS decode_stages
#define ATTN_CF_VBMI 1
#include "backends/cpu_flash/decode_impl.hpp"

#include <omp.h>

#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "attn/platform.hpp"
#include "testkit/bench_kit.hpp"
#include "cpu/isa.hpp"

namespace {

using namespace attn::cpu_flash;
using namespace attn::cpu_flash::decode_stages;
using attn_bench::PagedRows;
using Clock = std::chrono::steady_clock;

enum class Stage { read_hw, read, convert, qk, kernel };
constexpr const char* kStageNames[] = {"read_hw", "read", "convert", "qk", "kernel"};

/// Software prefetch of the read stages: hint (0 none, 1 T0, 2 T1, 3 T2, 4 NTA), chunks ahead.
struct Prefetch {
  int hint = 2, ahead = 1;
};

inline void prefetch_line(const char* p, int hint) {
  switch (hint) {
    case 1: _mm_prefetch(p, _MM_HINT_T0); break;
    case 2: _mm_prefetch(p, _MM_HINT_T1); break;
    case 3: _mm_prefetch(p, _MM_HINT_T2); break;
    case 4: _mm_prefetch(p, _MM_HINT_NTA); break;
    default: break;
  }
}

inline __m512i sum_lines(__m512i acc, const char* p, int64_t bytes) {
  __m512i a1 = _mm512_setzero_si512();
  int64_t off = 0;
  for (; off + 128 <= bytes; off += 128)
    acc = _mm512_add_epi32(acc, _mm512_loadu_si512(p + off)), a1 = _mm512_add_epi32(a1, _mm512_loadu_si512(p + off + 64));
  for (; off < bytes; off += 64) acc = _mm512_add_epi32(acc, _mm512_loadu_si512(p + off));
  return _mm512_add_epi32(acc, a1);
}

/// e4m3 bytes widened to bf16 the kernel's way, folded into acc (so nothing is optimized away).
inline __m512i widen_sum(__m512i acc, const char* p, int64_t bytes) {
  static const E4m3Lut lut;
  for (int64_t off = 0; off < bytes; off += 64) {
    __m512i a0, a1;
    e4m3x64_bf16_lanes(lut, _mm512_loadu_si512(p + off), a0, a1);
    acc = _mm512_add_epi32(acc, _mm512_xor_si512(a0, a1));
  }
  return acc;
}

/// One work item's keys as the kernel cuts them: chunks of ≤ kChunk keys inside one block.
struct ItemWalk {
  const PagedRows& r;
  int64_t row_bytes;
  const char* row(int32_t key) const {
    return reinterpret_cast<const char*>(r.base) + r.blocks[key / r.block_size] * r.block_stride +
           int64_t(key % r.block_size) * r.token_stride + r.head_offset;
  }
  int32_t chunk_len(int32_t c) const { return std::min<int32_t>({kChunk, r.end - c, r.block_size - c % r.block_size}); }
  int32_t chunk_after(int32_t c, int ahead) const {
    for (int i = 0; i < ahead && c < r.end; ++i) c += chunk_len(c);
    return c;
  }
  /// Rows [j0, j1) of the chunk at c, K and V, one prefetch per line.
  void prefetch(int32_t c, int j0, int j1, int hint) const {
    if (hint == 0 || c >= r.end) return;
    const int n = chunk_len(c);
    const char* k = row(c);
    for (int j = j0; j < std::min(j1, n); ++j)
      for (int64_t off = 0; off < row_bytes; off += 64)
        prefetch_line(k + j * r.token_stride + off, hint), prefetch_line(k + j * r.token_stride + r.v_offset + off, hint);
  }
};

template <KvType T, Stage S>
uint64_t run_stage(const PagedRows& r, int d, Prefetch pf) {
  constexpr int RB = 4, KB = 4;  // the kernel's tile for the GQA-4 group
  thread_local Scratch sc = [] {
    Scratch s{};
    for (auto& row : s.qb) std::fill(std::begin(row), std::end(row), uint16_t(0x3c00));  // bf16 ~ 0.0078
    return s;
  }();
  const ItemWalk w{r, int64_t(d) * kv_bytes<T>()};
  __m512i acc = _mm512_setzero_si512();
  if constexpr (S == Stage::read_hw) {
    for (int32_t key = r.begin; key < r.end; ++key) acc = sum_lines(sum_lines(acc, w.row(key), w.row_bytes), w.row(key) + r.v_offset, w.row_bytes);
  } else {
    w.prefetch(r.begin, 0, kChunk, pf.hint);
    for (int32_t c = r.begin; c < r.end;) {
      const int n = w.chunk_len(c);
      const char* k0 = w.row(c);
      const int32_t next = w.chunk_after(c, pf.ahead);
      // e4m3 is widened in registers as the kernel's 4-row tiles do (lookups, no scratch).
      constexpr bool Convert = T == KvType::e4m3 && S != Stage::read;
      const auto rows = [&](const char* p, int count) {
        for (int j = 0; j < count; ++j, p += r.token_stride) {
          if constexpr (Convert)
            acc = widen_sum(acc, p, w.row_bytes);
          else
            acc = sum_lines(acc, p, w.row_bytes);
        }
      };
      if constexpr (S == Stage::qk) {
        const char* kp[kChunk + 16];
        for (int j = 0; j < kChunk + 16; ++j) kp[j] = k0 + std::min(j, n - 1) * r.token_stride;
        for (int j0 = 0; j0 < n; j0 += KB) {
          w.prefetch(next, j0, j0 + KB, pf.hint);
          qk_tile<T, true, RB, KB>(sc, 0, kp + j0, d, &sc.s[0][j0]);
        }
      } else {
        for (int j0 = 0; j0 < n; j0 += KB) w.prefetch(next, j0, j0 + KB, pf.hint), rows(k0 + j0 * r.token_stride, std::min(KB, n - j0));
      }
      rows(k0 + r.v_offset, n);
      c += n;
    }
  }
  alignas(64) uint32_t lanes[16];
  _mm512_store_si512(lanes, acc);
  return lanes[0] + sc.kb[0][0] + sc.vb[0][0] + uint64_t(sc.s[0][0]);
}

/// The stages on an HND_PAIRS cache, walked as the pair kernel walks it: chunks of up to 64 keys from
/// multiples of 16, per dim pair the chunk's K bytes, then the chunk's V rows of key pairs; the
/// next chunk's lines are prefetched during the K loop (T1, as the kernel; pf.hint 0: none).
/// read_hw reads the same runs in the same block order as on HND (the bytes are the same).
template <KvType T, Stage S>
uint64_t run_stage_pairs(const PagedRows& r, int d, Prefetch pf) {
  if constexpr (S == Stage::read_hw) return run_stage<T, S>(r, d, pf);
  constexpr int RB = 4;
  constexpr int64_t eb = kv_bytes<T>();
  thread_local Scratch sc = [] {
    Scratch s{};
    for (auto& row : s.qb) std::fill(std::begin(row), std::end(row), uint16_t(0x3c00));
    return s;
  }();
  const int bs = r.block_size;
  const int64_t kpair = 2 * int64_t(bs) * eb, vpair = 2 * r.token_stride;
  auto chunk = [&](int32_t c) -> PairChunk {
    if (c >= r.end) return {};
    const char* run_k = reinterpret_cast<const char*>(r.base) + r.blocks[c / bs] * r.block_stride + r.head_offset;
    return pair_chunk_at(run_k, r.v_offset, vpair, c, r.end, bs, eb);
  };
  __m512i acc = _mm512_setzero_si512();
  const PairChunk first = chunk(r.begin - r.begin % 16);
  for (int dp = 0; pf.hint && dp < d / 2; ++dp) prefetch_l2(first.k + dp * kpair, first.n * 2 * eb);
  if (pf.hint) prefetch_l2(first.v, int64_t(first.n / 2) * vpair);
  for (int32_t c = r.begin - r.begin % 16; c < r.end;) {
    const PairChunk pc = chunk(c), nx = pf.hint ? chunk(c + pc.n) : PairChunk{};
    const int64_t bytes = int64_t(pc.n) * 2 * eb, nx_bytes = int64_t(nx.n) * 2 * eb;  // per dim pair
    if constexpr (S == Stage::qk) {
      qk_pairs_n<T, RB>(sc, 0, pc.k, kpair, d, pc.n, nx, kpair, true);
    } else {
      for (int dp = 0; dp < d / 2; ++dp) {
        for (int64_t off = 0; off < nx_bytes; off += 64)
          prefetch_line(nx.k + dp * kpair + off, pf.hint), prefetch_line(nx.v + dp * nx_bytes + off, pf.hint);
        if constexpr (S == Stage::convert) {
          for (int64_t off = 0; off < bytes; off += 64) {
            __m512i w[2];
            pair_lines<T, 2>(pc.k + dp * kpair + off, w);
            acc = _mm512_add_epi32(acc, _mm512_xor_si512(w[0], w[1]));
          }
        } else {
          acc = sum_lines(acc, pc.k + dp * kpair, bytes);
        }
      }
    }
    const int64_t v_bytes = int64_t(pc.n / 2) * vpair;
    if constexpr (T != KvType::bf16 && S != Stage::read) {
      for (int64_t off = 0; off < v_bytes; off += 64) {
        __m512i w[2];
        pair_lines<T, 2>(pc.v + off, w);
        acc = _mm512_add_epi32(acc, _mm512_xor_si512(w[0], w[1]));
      }
    } else {
      acc = sum_lines(acc, pc.v, v_bytes);
    }
    c += pc.n;
  }
  alignas(64) uint32_t lanes[16];
  _mm512_store_si512(lanes, acc);
  return lanes[0] + uint64_t(sc.s[0][0]);
}

template <KvType T>
uint64_t (*stage_fn(Stage s))(const PagedRows&, int, Prefetch) {
  switch (s) {
    case Stage::read_hw: return &run_stage<T, Stage::read_hw>;
    case Stage::read: return &run_stage<T, Stage::read>;
    case Stage::convert: return &run_stage<T, Stage::convert>;
    default: return &run_stage<T, Stage::qk>;
  }
}

struct Options {
  int reps = 9;
  bool all = false, cache = false, kernel_only = false;
  int threads = 0;  // 0: 1 and all
  int block_size = 0;  // 0: the backend's preferred block size
  int cache_context = 2048;  // --cache: keys per sequence (2048: 8 MiB bf16, L3; 128: 512 KiB, L2)
  std::string filter;
  Prefetch pf;
};

double thread_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

/// Seconds of one call of stage `s` on the next instance: on one thread the calling thread's CPU
/// time (what other processes on a shared machine take is not counted), else wall time.
template <KvType T>
uint64_t (*pairs_stage_fn(Stage s))(const PagedRows&, int, Prefetch) {
  switch (s) {
    case Stage::read_hw: return &run_stage_pairs<T, Stage::read_hw>;
    case Stage::read: return &run_stage_pairs<T, Stage::read>;
    case Stage::convert: return &run_stage_pairs<T, Stage::convert>;
    default: return &run_stage_pairs<T, Stage::qk>;
  }
}

double time_stage(attn_bench::Workload& w, Stage s, bool fp8, bool pairs, int threads, int d, Prefetch pf) {
  omp_set_num_threads(threads);
  const std::vector<PagedRows> items = s == Stage::kernel ? std::vector<PagedRows>{} : w.paged_rows(w.take_instance());
  const auto fn = pairs ? (fp8 ? pairs_stage_fn<KvType::e4m3>(s) : pairs_stage_fn<KvType::bf16>(s))
                        : fp8 ? stage_fn<KvType::e4m3>(s) : stage_fn<KvType::bf16>(s);
  uint64_t total = 0;
  const double c0 = thread_seconds();
  const auto t0 = Clock::now();
  if (s == Stage::kernel) {
    w.run_once();
  } else {
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) reduction(+ : total)
    for (std::size_t j = 0; j < items.size(); ++j) total += fn(items[j], d, pf);
  }
  const double sec = std::chrono::duration<double>(Clock::now() - t0).count(), cpu = thread_seconds() - c0;
  volatile uint64_t sink = total;
  (void)sink;
  return threads == 1 ? cpu : sec;
}

/// --kernel: the full call on every quantized cache format besides bf16 and fp8 (on the layout
/// the backend gives it), so each format's compute side can be read off a --cache run.
const std::vector<attn::KVCacheDType> kKernelDtypes = {
    attn::KVCacheDType::auto_, attn::KVCacheDType::fp8_e4m3, attn::KVCacheDType::int8_per_token_head,
    attn::KVCacheDType::fp8_per_token_head, attn::KVCacheDType::int4_per_token_head, attn::KVCacheDType::nvfp4,
    attn::KVCacheDType::turboquant_k8v4, attn::KVCacheDType::turboquant_4bit_nc, attn::KVCacheDType::turboquant_3bit_nc};

std::string kv_label(attn::KVCacheDType kv) {
  if (kv == attn::KVCacheDType::auto_) return "bf16";
  if (kv == attn::KVCacheDType::fp8_e4m3) return "fp8";
  return std::string(attn::to_string(kv));
}

void run_shape(const attn_bench::Shape& s, const Options& o, std::size_t pool, const double* dram, int max_threads) {
  const bool fp8 = s.kv == attn::KVCacheDType::fp8_e4m3, pairs = s.layout == attn::KVLayout::HND_PAIRS;
  const bool staged = s.kv == attn::KVCacheDType::auto_ || fp8;  // the stage loops read bf16 and e4m3 caches
  attn_bench::Workload w(s, "cpu_flash", 0, pool);
  std::vector<Stage> stages;
  if (!o.kernel_only && staged) {
    stages = {Stage::read_hw, Stage::read};
    if (fp8) stages.push_back(Stage::convert);
    stages.push_back(Stage::qk);
  }
  stages.push_back(Stage::kernel);
  for (int threads : {1, max_threads}) {
    if (o.threads > 0 && threads != o.threads) continue;
    std::vector<std::vector<double>> t(stages.size());
    for (std::size_t i = 0; i < stages.size(); ++i) time_stage(w, stages[i], fp8, pairs, threads, s.head_size, o.pf);  // warm-up
    for (int rep = 0; rep < o.reps; ++rep)
      for (std::size_t i = 0; i < stages.size(); ++i) t[i].push_back(time_stage(w, stages[i], fp8, pairs, threads, s.head_size, o.pf));
    for (std::size_t i = 0; i < stages.size(); ++i) {
      std::sort(t[i].begin(), t[i].end());
      const double sec = t[i][t[i].size() / 2], gbs = w.kv_bytes() / sec / 1e9;
      std::printf("%-28s %-19s %-9s %2d  %-8s %9.3f ms %7.1f GB/s %6.2f of read\n", s.name.c_str(), kv_label(s.kv).c_str(),
                  s.layout ? std::string(attn::to_string(*s.layout)).c_str() : "own", threads,
                  kStageNames[int(stages[i])], sec * 1e3, gbs, gbs / dram[threads == 1 ? 0 : 1]);
    }
    if (max_threads == 1) break;
  }
  std::fflush(stdout);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw attn::Error(a + ": needs a value");
      return argv[++i];
    };
    if (a == "--reps") o.reps = std::max(1, std::atoi(value().c_str()));
    else if (a == "--all") o.all = true;
    else if (a == "--cache") o.cache = true;
    else if (a == "--kernel") o.kernel_only = true;
    else if (a == "--block-size") o.block_size = std::max(0, std::atoi(value().c_str()));
    else if (a == "--context") o.cache_context = std::max(1, std::atoi(value().c_str()));
    else if (a == "--threads") o.threads = std::atoi(value().c_str());
    else if (a == "--filter") o.filter = value();
    else if (a == "--pf") {
      const std::string v = value();
      if (std::sscanf(v.c_str(), "%d:%d", &o.pf.hint, &o.pf.ahead) != 2 || o.pf.hint < 0 || o.pf.hint > 4 || o.pf.ahead < 1)
        throw attn::Error("--pf " + v + ": expected HINT:AHEAD, hint 0 (none) 1 (t0) 2 (t1) 3 (t2) 4 (nta), ahead ≥ 1");
    } else
      throw attn::Error("unknown argument " + a + " (expected --reps N, --all, --cache, --context N, --block-size N, --kernel, --threads N, --filter S, --pf HINT:AHEAD)");
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) try {
  const attn::Platform& cpu = attn::detect_cpu();
  if (attn::cpu::best_isa(cpu) < attn::cpu::Isa::avx512_bf16 || !cpu.has(attn::CpuFeature::avx512_vbmi)) {
    std::fprintf(stderr, "attn_decode_stages needs AVX-512 BF16 and VBMI (the kernels it times)\n");
    return 1;
  }
  const Options o = parse(argc, argv);
  const attn_bench::Pool pool = o.cache ? attn_bench::Pool{0, false} : attn_bench::choose_pool(false);
  const int max_threads = omp_get_max_threads();
  const std::size_t read_pool = std::max<std::size_t>(pool.bytes, std::size_t(256) << 20);
  const double dram[2] = {attn_bench::read_bandwidth(1, read_pool, 5).value, attn_bench::read_bandwidth(max_threads, read_pool, 5).value};
  double load[1] = {0};
  getloadavg(load, 1);
  std::printf("pool %zu MiB (%s), LLC %zu MiB, load %.2f; streaming read %.1f GB/s (1 thread), %.1f GB/s (%d threads)\n",
              pool.bytes >> 20, o.cache ? "one instance: cache figures" : pool.label(), attn_bench::last_level_cache().bytes >> 20,
              load[0], dram[0], dram[1], max_threads);
  // The MAC bound of the group-of-4 kernel: every 64-byte line of K or V costs 4 vdpbf16ps for
  // bf16 (32 elements × 4 rows) and 8 for e4m3 (64 elements), whatever else runs.
  // One thread on its CPU time, like the one-thread stages.
  const double dot1 = attn_bench::median_after_warmup(5, [] {
    const double c0 = thread_seconds(), flop = attn_bench::simd().dot_bf16(2'000'000);
    return flop / (thread_seconds() - c0) / 1e9;
  });
  std::printf("vdpbf16ps zmm %.0f GFLOP/s (1 thread, CPU time): MAC bound of GQA-4 decode %.1f GB/s bf16, %.1f GB/s e4m3 per core\n",
              dot1, dot1 / 64 / 4 * 64, dot1 / 64 / 8 * 64);
  std::printf("software prefetch of the read/convert/qk stages: hint %d, %d chunk(s) ahead\n", o.pf.hint, o.pf.ahead);
  std::vector<attn_bench::Shape> shapes;
  for (int b : {1, 8})
    for (int ctx : {4096, 16384})
      for (attn::KVCacheDType kv : o.kernel_only ? kKernelDtypes : std::vector<attn::KVCacheDType>{attn::KVCacheDType::auto_, attn::KVCacheDType::fp8_e4m3}) {
        if (!o.all && !((b == 1 && ctx == 4096) || (b == 8 && ctx == 16384))) continue;
        if (o.cache && !(b == 1 && ctx == 4096)) continue;
        attn_bench::Shape s;
        s.batch = b, s.context = o.cache ? o.cache_context : ctx, s.kv = kv, s.block_size = o.block_size;
        s.name = "llama8b_decode_b" + std::to_string(b) + "_ctx" + std::to_string(s.context);
        if (!o.filter.empty() && (s.name + "_" + kv_label(kv)).find(o.filter) == std::string::npos) continue;
        if (kv != attn::KVCacheDType::auto_ && kv != attn::KVCacheDType::fp8_e4m3) {  // the backend's own layout only
          shapes.push_back(s);
          continue;
        }
        for (attn::KVLayout l : {attn::KVLayout::HND, attn::KVLayout::HND_PAIRS}) {  // side by side
          s.layout = l;
          shapes.push_back(s);
        }
      }
  for (const auto& s : shapes) run_shape(s, o, pool.bytes, dram, max_threads);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "attn_decode_stages: %s\n", e.what());
  return 1;
}
