// NaN and Inf must not cross a mask. For every registered CPU backend and every layer kind it
// serves (dense, block-sparse, MLA, top-k sparse MLA), NaN / +Inf / -Inf are planted in the K or
// V of positions some rows must not see: future keys in the same tile as a row's visible ones
// (causal), keys just outside the sliding window, and the unused slots of each sequence's last
// block. A row the fp64 oracle computes finite with the poison in place must be bitwise equal to
// the run with finite values there; a row that does see a NaN must come out NaN where the oracle
// does (a kernel that drops a NaN key hides corrupt inputs).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>

#include "conformance/case_generator.hpp"
#include "selector/selector_test_util.hpp"
#include "support/cpu_isa_env.hpp"
#include "support/mla_reference.hpp"

namespace attn::test {
namespace {

enum class Part { k, v };

struct Poison {
  double value;
  Part part;
  std::string name() const {
    std::ostringstream os;
    os << value << " in " << (part == Part::k ? "K" : "V");
    return os.str();
  }
};

// One layer kind a backend may serve, and how to build, run and check a case of it.
struct Scenario {
  std::string name;
  LayerConfig config;                     // what the backend must serve
  std::vector<SeqShape> seqs;
  int block_size = 16;
  // Positions to poison per sequence (absolute), given the sequence's length.
  std::function<std::vector<int>(int seq, int len, int query_len)> positions;
  bool unused_slots = false;              // poison the unused slots of each last block instead
};

int round_up(int x, int m) { return (x + m - 1) / m * m; }

// Writes `value` into the cache at (sequence s, position t), every KV head and element of the part.
void poke_cache(KVCache& cache, const BatchMetadata& md, int s, int t, Part part, double value) {
  const PagedKV kv = cache.view();
  const int width = part == Part::k ? kv.head_size : kv.head_size_v;
  for (int h = 0; h < kv.num_kv_heads; ++h) {
    const int64_t b = md.blocks(s)[t / kv.block_size];
    for (int x = 0; x < width; ++x)
      store_from_float(kv.base, kv.dtype, kv_element_offset(kv, b, t % kv.block_size, h, x, part == Part::v), float(value));
  }
}

// The adapters between the generic check and the two case types.
struct Subject {
  std::function<void()> run;                                  // forward into `out`
  std::function<std::vector<double>()> oracle;                // fp64, over the dense copies
  std::function<void(int s, int t, Part p, double v)> poke_copy;  // the oracle's dense copy
  std::function<void()> save_copy, restore_copy;                  // around poke_copy
  KVCache* cache;
  const BatchMetadata* md;
  const Buffer* out;
  int row_width;  // output elements per token (heads x width)
  bool v_in_k;    // MLA: the value is part of the key entry
};

// Runs the scenario on `sub` with every poison; returns the failures (empty = pass).
std::vector<std::string> check_poisons(Subject& sub, const Scenario& sc, const std::string& describe, bool visible_nan) {
  std::vector<std::string> fails;
  const std::size_t cache_bytes = sub.cache->bytes();
  std::vector<char> clean(cache_bytes);
  const BatchMetadata& md = *sub.md;
  // Unused slots get finite zeros in the clean run, so "finite values there" is literal.
  if (sc.unused_slots)
    for (int s = 0; s < md.num_seqs; ++s)
      for (int t = md.seq_lens[s]; t < round_up(md.seq_lens[s], sub.cache->view().block_size); ++t)
        for (Part p : {Part::k, Part::v}) poke_cache(*sub.cache, md, s, t, p, 0.0);
  std::memcpy(clean.data(), sub.cache->data(), cache_bytes);
  sub.run();
  const Buffer& out = *sub.out;
  const std::size_t es = dtype_size(out.dtype()), row_bytes = std::size_t(sub.row_width) * es;
  std::vector<char> clean_out(out.bytes());
  std::memcpy(clean_out.data(), out.data(), out.bytes());

  const bool fp8 = sub.cache->spec().dtype == DType::fp8_e4m3 || sub.cache->spec().dtype == DType::fp8_e5m2;
  std::vector<Poison> poisons;
  for (Part p : sub.v_in_k ? std::vector<Part>{Part::k} : std::vector<Part>{Part::k, Part::v}) {
    poisons.push_back({std::numeric_limits<double>::quiet_NaN(), p});
    if (!fp8) {  // e4m3 has no infinity
      poisons.push_back({std::numeric_limits<double>::infinity(), p});
      poisons.push_back({-std::numeric_limits<double>::infinity(), p});
    }
  }
  for (const Poison& poison : poisons) {
    std::memcpy(sub.cache->data(), clean.data(), cache_bytes);
    std::vector<std::pair<int, int>> at;  // (sequence, position)
    for (int s = 0; s < md.num_seqs; ++s) {
      const int len = md.seq_lens[s];
      if (sc.unused_slots) {
        for (int t = len; t < round_up(len, sub.cache->view().block_size); ++t) at.push_back({s, t});
      } else {
        for (int t : sc.positions(s, len, md.query_len(s))) at.push_back({s, t});
      }
    }
    for (auto [s, t] : at) poke_cache(*sub.cache, md, s, t, poison.part, poison.value);
    std::vector<double> want;
    if (!sc.unused_slots) {  // the oracle reads only positions < len
      sub.save_copy();
      for (auto [s, t] : at) sub.poke_copy(s, t, poison.part, poison.value);
      want = sub.oracle();
      sub.restore_copy();
    }
    sub.run();
    for (int tok = 0; tok < md.num_tokens; ++tok) {
      bool oracle_finite = true;
      for (int x = 0; x < sub.row_width && !want.empty(); ++x)
        oracle_finite = oracle_finite && std::isfinite(want[std::size_t(tok) * sub.row_width + x]);
      const char* got_row = static_cast<const char*>(out.data()) + std::size_t(tok) * row_bytes;
      std::ostringstream msg;
      if (oracle_finite && !visible_nan) {
        if (std::memcmp(got_row, clean_out.data() + std::size_t(tok) * row_bytes, row_bytes) == 0) continue;
        int x = 0;
        while (x < sub.row_width && std::memcmp(got_row + x * es, clean_out.data() + std::size_t(tok) * row_bytes + x * es, es) == 0) ++x;
        msg << sc.name << ", " << poison.name() << ": token " << tok << " cannot see the poison but changed: element "
            << x << " = " << load_as_float(got_row, out.dtype(), x) << ", with finite values there "
            << load_as_float(clean_out.data() + std::size_t(tok) * row_bytes, out.dtype(), x);
      } else if (!oracle_finite && visible_nan && std::isnan(poison.value)) {
        int x = 0;
        while (x < sub.row_width && (!std::isnan(want[std::size_t(tok) * sub.row_width + x]) ||
                                     std::isnan(load_as_float(got_row, out.dtype(), x))))
          ++x;
        if (x == sub.row_width) continue;
        msg << sc.name << ", " << poison.name() << ": token " << tok << " sees the NaN but element " << x << " = "
            << load_as_float(got_row, out.dtype(), x) << " (the oracle gives NaN)";
      } else {
        continue;
      }
      fails.push_back(msg.str() + "\n    " + describe);
      break;  // the first bad row per poison is enough
    }
  }
  std::memcpy(sub.cache->data(), clean.data(), cache_bytes);
  return fails;
}

// Causal: in each sequence, a key one past the first query row and the last key, so rows before
// them see neighbours in the same tile but not these. Window: keys one and a few positions
// outside the window of every row (the first query row has the smallest window start).
std::vector<Scenario> scenarios(const LayerConfig& base) {
  std::vector<Scenario> out;
  const std::vector<SeqShape> seqs = {{0, 40}, {20, 30}, {9, 1}, {70, 5}};
  Scenario causal{"future keys (causal)", base, seqs, 16, [](int, int len, int ql) {
                    const int first_q = len - ql;
                    return std::vector<int>{std::min(first_q + 1, len - 1), len - 1};
                  }};
  out.push_back(causal);
  Scenario window{"keys outside the sliding window", base, {{40, 1}, {30, 6}, {70, 5}}, 16, [](int, int len, int ql) {
                    const int first_q = len - ql, edge = first_q - 8;  // window 8: keys <= q - 8 are out
                    return edge > 2 ? std::vector<int>{edge, edge - 2} : std::vector<int>{};
                  }};
  window.config.sliding_window = 8;
  out.push_back(window);
  Scenario unused{"unused slots of the last block", base, {{0, 37}, {21, 5}, {50, 1}}, 16, nullptr, true};
  out.push_back(unused);
  // Rows that see nothing but NaN: the running max never becomes finite, and a kernel that
  // treats that like a fully masked row writes 0 where the oracle gives NaN. Sequence 1 takes
  // the prefill path, sequence 2 (one query) the decode path.
  Scenario all_nan{"every key of a sequence", base, seqs, 16, [](int s, int len, int) {
                     std::vector<int> all;
                     if (s == 1 || s == 2)
                       for (int t = 0; t < len; ++t) all.push_back(t);
                     return all;
                   }};
  out.push_back(all_nan);
  return out;
}

LayerConfig dense_layer(DType io, KVCacheDType kv) {
  return {.num_heads = 8, .num_kv_heads = 2, .head_size = 64, .dtype = io, .kv_cache_dtype = kv};
}

LayerConfig blocksparse_layer(DType io, KVCacheDType kv) {
  LayerConfig c = dense_layer(io, kv);
  c.use_block_sparse = true;
  c.bs_block_size = 8;
  c.bs_local_blocks = 2;
  c.bs_vert_stride = 3;
  return c;
}

std::vector<std::string> run_generic(const std::string& backend, const Scenario& sc, bool block_sparse, bool visible_nan) {
  CaseSpec spec;
  spec.config = sc.config;
  spec.seqs = sc.seqs;
  spec.block_size = sc.block_size;
  spec.seed = fresh_seed();
  Case c = make_case(spec, backend);
  Subject sub;
  sub.run = [&] { run_forward(c); };
  sub.oracle = [&] { return block_sparse ? blocksparse_reference(c) : reference_attention(c); };
  const int Hkv = sc.config.num_kv_heads, D = sc.config.head_size, Dv = sc.config.effective_head_size_v();
  sub.poke_copy = [&](int s, int t, Part p, double v) {
    auto& dense = p == Part::k ? c.dense_k[std::size_t(s)] : c.dense_v[std::size_t(s)];
    const int w = p == Part::k ? D : Dv;
    for (int i = 0; i < Hkv * w; ++i) dense[std::size_t(t) * Hkv * w + std::size_t(i)] = v;
  };
  std::vector<std::vector<double>> saved_k, saved_v;
  sub.save_copy = [&] { saved_k = c.dense_k, saved_v = c.dense_v; };
  sub.restore_copy = [&] { c.dense_k = saved_k, c.dense_v = saved_v; };
  sub.cache = c.cache.get();
  sub.md = &c.md;
  sub.out = &c.out;
  sub.row_width = sc.config.num_heads * Dv;
  sub.v_in_k = false;
  return check_poisons(sub, sc, spec.describe(), visible_nan);
}

std::vector<std::string> run_mla(const std::string& backend, const Scenario& sc, KVCacheDType kv, bool visible_nan) {
  MlaCaseSpec spec = mla_spec(backend, 8, sc.config.dtype, kv, fresh_seed(), sc.seqs);
  spec.block_size = sc.block_size;
  MlaCase c = make_mla_case(spec);
  const int W = spec.rank + spec.rope;
  Subject sub;
  sub.run = [&] { run_mla_forward(c); };
  sub.oracle = [&] { return mla_absorbed_reference(c); };
  sub.poke_copy = [&](int s, int t, Part, double v) {
    for (int x = 0; x < W; ++x) c.latent[std::size_t(s)][std::size_t(t) * W + std::size_t(x)] = v;
  };
  std::vector<std::vector<double>> saved;
  sub.save_copy = [&] { saved = c.latent; };
  sub.restore_copy = [&] { c.latent = saved; };
  sub.cache = c.cache.get();
  sub.md = &c.md;
  sub.out = &c.out;
  sub.row_width = spec.num_heads * spec.rank;
  sub.v_in_k = true;
  return check_poisons(sub, sc, spec.describe(), visible_nan);
}

std::vector<std::string> cpu_backends() {
  std::vector<std::string> out;
  for (auto& d : Registry::instance().backends()) {
    const auto& p = d->caps.platforms;
    if (!d->caps.attention_free && std::find(p.begin(), p.end(), PlatformKind::cpu) != p.end())
      out.push_back(d->name);
  }
  return out;
}

// Every (scenario, precision) the backend serves, run; failures reported per case. Skips when
// the backend serves none of them here.
void run_all(const std::string& backend, bool visible_nan) {
  auto d = Registry::instance().find(backend);
  ASSERT_TRUE(d);
  std::string why;
  if (!Registry::instance().ensure_module(*d, why)) GTEST_SKIP() << backend << ": " << why;
  const Platform& here = detect_cpu();
  int ran = 0;
  std::vector<std::string> fails;
  std::vector<std::pair<DType, KVCacheDType>> precisions = {
      {DType::bfloat16, KVCacheDType::auto_}, {DType::float32, KVCacheDType::auto_}, {DType::bfloat16, KVCacheDType::fp8_e4m3}};
  if (sweep_from_env(SweepSize::normal) == SweepSize::quick) precisions.resize(1);  // sanitizer runs
  for (auto [io, kv] : precisions) {
    if (d->caps.mla) {
      for (const Scenario& sc : scenarios(dense_layer(io, kv))) {
        if (sc.config.sliding_window > 0) continue;  // MLA layers have no window
        MlaCaseSpec probe;  // the layer this MLA case builds, to ask the backend
        LayerConfig cfg;
        cfg.num_heads = 8, cfg.num_kv_heads = 1, cfg.head_size = probe.rank + probe.rope, cfg.head_size_v = probe.rank;
        cfg.dtype = io, cfg.kv_cache_dtype = kv, cfg.use_mla = true, cfg.kv_lora_rank = probe.rank;
        cfg.qk_rope_head_dim = probe.rope, cfg.qk_nope_head_dim = probe.nope, cfg.v_head_dim = probe.v_dim;
        if (d->caps.sparse) cfg.use_sparse = true, cfg.index_topk = 24;
        if (!evaluate(*d, cfg, here).valid) continue;
        ++ran;
        for (auto& f : run_mla(backend, sc, kv, visible_nan)) fails.push_back(f);
      }
      continue;
    }
    const bool bsparse = d->caps.block_sparse;
    for (const Scenario& sc : scenarios(bsparse ? blocksparse_layer(io, kv) : dense_layer(io, kv))) {
      if (!evaluate(*d, sc.config, here).valid) continue;
      ++ran;
      for (auto& f : run_generic(backend, sc, bsparse, visible_nan)) fails.push_back(f);
    }
  }
  if (ran == 0) GTEST_SKIP() << backend << " serves none of the NaN-isolation layers here";
  for (std::size_t i = 0; i < fails.size() && i < 8; ++i) ADD_FAILURE() << backend << ": " << fails[i];
  if (fails.size() > 8) ADD_FAILURE() << backend << ": " << fails.size() - 8 << " more";
}

// A NaN query row: its scores are all NaN, so its output must be NaN (as the oracle's), and no
// other row — not even the other heads of its KV group, which share the tile — may change.
void run_nan_query(const std::string& backend) {
  auto d = Registry::instance().find(backend);
  ASSERT_TRUE(d);
  if (d->caps.mla) GTEST_SKIP() << backend << ": MLA queries are covered by its own suite";
  std::string why;
  if (!Registry::instance().ensure_module(*d, why)) GTEST_SKIP() << backend << ": " << why;
  int ran = 0;
  for (auto [io, kv] : {std::pair{DType::bfloat16, KVCacheDType::auto_}, std::pair{DType::float32, KVCacheDType::auto_},
                        std::pair{DType::bfloat16, KVCacheDType::fp8_e4m3}}) {
    CaseSpec spec;
    spec.config = d->caps.block_sparse ? blocksparse_layer(io, kv) : dense_layer(io, kv);
    if (!evaluate(*d, spec.config, detect_cpu()).valid) continue;
    ++ran;
    spec.seqs = {{0, 40}, {20, 30}, {9, 1}, {70, 5}};
    spec.seed = fresh_seed();
    Case c = make_case(spec, backend);
    run_forward(c);
    const std::vector<char> clean(static_cast<const char*>(c.out.data()), static_cast<const char*>(c.out.data()) + c.out.bytes());
    const int H = spec.config.num_heads, D = spec.config.head_size, Dv = spec.config.effective_head_size_v();
    const int head = 3;
    // The first query row of sequence 1 (prefill) and sequence 2's only row (decode).
    const std::vector<int64_t> tokens = {c.md.query_start_loc[1], c.md.query_start_loc[2]};
    for (int64_t t : tokens)
      for (int x = 0; x < D; ++x) store_from_float(c.q.data(), io, (t * H + head) * D + x, std::nanf(""));
    run_forward(c);
    for (int64_t t = 0; t < c.md.num_tokens; ++t)
      for (int h = 0; h < H; ++h) {
        const bool poisoned = h == head && std::find(tokens.begin(), tokens.end(), t) != tokens.end();
        for (int x = 0; x < Dv; ++x) {
          const int64_t i = (t * H + h) * Dv + x;
          const float got = load_as_float(c.out.data(), c.out.dtype(), i), was = load_as_float(clean.data(), c.out.dtype(), i);
          if (poisoned ? !std::isnan(got) : std::memcmp(&got, &was, sizeof got) != 0) {
            ADD_FAILURE() << backend << " " << to_string(io) << "/" << to_string(kv) << ": token " << t << " head " << h
                          << " element " << x << " = " << got << (poisoned ? " (its query is NaN: expected NaN)"
                                                                          : " changed (was " + std::to_string(was) + ")")
                          << "\n    " << spec.describe();
            return;
          }
        }
      }
  }
  if (ran == 0) GTEST_SKIP() << backend << " serves none of the NaN-query layers here";
}

class NanIsolation : public ::testing::TestWithParam<std::string> {};

TEST_P(NanIsolation, NanQueryRowIsNanAndAlone) { run_nan_query(GetParam()); }

TEST_P(NanIsolation, MaskedNanAndInfNeverReachTheOutput) { run_all(GetParam(), false); }
TEST_P(NanIsolation, VisibleNanReachesTheOutput) { run_all(GetParam(), true); }

INSTANTIATE_TEST_SUITE_P(Backends, NanIsolation, ::testing::ValuesIn(cpu_backends()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// cpu_flash's other kernel builds as well (ATTN_CPU_ISA; the loop above runs the best one): the
// portable build reduces with one lane, where a max that drops a NaN score drops every score
// before it too.
TEST(NanIsolationCpuFlashBuilds, EveryKernelBuild) {
  for_each_cpu_isa(family_isas_here({cpu::Isa::avx512, cpu::Isa::avx2, cpu::Isa::generic}), [](cpu::Isa) {
    run_all("cpu_flash", false);
    run_all("cpu_flash", true);
    run_nan_query("cpu_flash");
  });
}

}  // namespace
}  // namespace attn::test
