// Benchmark workloads for cpu_mla / cpu_sparse / cpu_blocksparse (see testkit/mla_bench.hpp).
// Caches are filled with random values directly and disjoint instances of each batch, together
// the DRAM pool (attn_bench::dram_pool_bytes), are cycled, so a timed call reads memory the previous calls
// did not leave in the cache.
#include "testkit/mla_bench.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>

#include "attn/attn.hpp"
#include "attn/limits.hpp"
#include "kernels/gather/mla_kernel.hpp"
#include "backends/cpu_blocksparse/blocksparse_forward.hpp"
#include "testkit/bench_kit.hpp"

namespace attn::testkit {
namespace {

using Clock = std::chrono::steady_clock;

struct Step {
  LayerConfig cfg;
  std::string backend;
  int batch = 1, context = 0, query_len = 1, block_size = 64, topk = 0;
  int threads = 0;
  size_t pool_bytes = attn_bench::dram_pool_bytes();  // rotated over: at least 2 instances, >= this many bytes
};

class Bench {
 public:
  explicit Bench(const Step& st) : st_(st) {
    auto desc = Registry::instance().find(st.backend);
    if (!desc) throw Error("bench: backend " + st.backend + " is not registered");
    LayerParams p;
    p.config = st.cfg;
    p.num_threads = st.threads;
    impl_ = desc->create(p);
    const int len = st.context + st.query_len;
    const int blocks_per_seq = (len + st.block_size - 1) / st.block_size;
    const KVCacheSpec probe = desc->cache_spec(st.cfg, 1, st.block_size);
    const size_t block_bytes = size_t(probe.bytes());  // one block
    const size_t instance_bytes = block_bytes * blocks_per_seq * st.batch;
    instances_ = int(std::clamp<size_t>((st.pool_bytes + instance_bytes - 1) / instance_bytes, 2, 64));
    cache_ = std::make_unique<KVCache>(desc->cache_spec(st.cfg, blocks_per_seq * st.batch * instances_, st.block_size));
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    if (cache_->view().ds_mla) {
      // Real entries (finite tile scales), quantized from random latent rows.
      float row[ds_mla::kRank + ds_mla::kRope];
      auto* e = static_cast<uint8_t*>(cache_->data());
      for (size_t off = 0; off < cache_->bytes(); off += ds_mla::kEntryBytes) {
        for (float& x : row) x = uni(rng);
        ds_mla::quantize_entry(row, e + off);
      }
    } else {
      uint16_t* data = static_cast<uint16_t*>(cache_->data());
      for (size_t i = 0; i < cache_->bytes() / 2; ++i) data[i] = f32_to_bf16(uni(rng));
    }
    std::vector<int32_t> ids(size_t(blocks_per_seq) * st.batch * instances_);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);  // paged: blocks scattered over the pool
    for (int in = 0; in < instances_; ++in) {
      std::vector<SequenceSpec> seqs;
      for (int b = 0; b < st.batch; ++b) {
        const size_t first = (size_t(in) * st.batch + b) * blocks_per_seq;
        seqs.push_back({st.context, st.query_len, std::vector<int32_t>(ids.begin() + first, ids.begin() + first + blocks_per_seq)});
      }
      md_.push_back(BatchMetadata::build(seqs, st.block_size, cache_->spec().num_blocks));
    }
    const int T = md_[0].num_tokens;
    q_ = Buffer(st.cfg.dtype, {T, st.cfg.num_heads, st.cfg.head_size});
    out_ = Buffer(st.cfg.dtype, {T, st.cfg.num_heads, probe.layout == KVLayout::MLA ? probe.v_width() : st.cfg.effective_head_size_v()});
    uint16_t* q = static_cast<uint16_t*>(q_.data());
    for (int64_t i = 0; i < q_.view().numel(); ++i) q[i] = f32_to_bf16(uni(rng) * 0.1f);
    if (st.topk > 0) {
      // Random distinct earlier positions per token, like an indexer's output.
      topk_.resize(size_t(T) * st.topk);
      std::vector<int32_t> all(st.context);
      std::iota(all.begin(), all.end(), 0);
      for (int t = 0; t < T; ++t) {
        std::shuffle(all.begin(), all.end(), rng);
        std::copy_n(all.begin(), st.topk, topk_.begin() + size_t(t) * st.topk);
        std::sort(topk_.begin() + size_t(t) * st.topk, topk_.begin() + size_t(t + 1) * st.topk);
      }
    }
  }

  double median_ms(int reps) {
    std::vector<double> ms;
    for (int r = 0; r <= reps; ++r) {
      const BatchMetadata& md = md_[next_++ % md_.size()];
      ForwardArgs args;
      args.q = q_.view(), args.out = out_.view(), args.cache = cache_.get();
      if (!topk_.empty()) args.topk_indices = TensorView::contiguous(topk_.data(), DType::int32, {md.num_tokens, st_.topk});
      const auto t0 = Clock::now();
      impl_->forward(md, args);
      const double dt = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (r > 0) ms.push_back(dt);  // the first call warms up
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }
  std::string variant() const { return impl_->variant(); }

 private:
  Step st_;
  std::unique_ptr<AttentionImpl> impl_;
  std::unique_ptr<KVCache> cache_;
  std::vector<BatchMetadata> md_;
  Buffer q_, out_;
  std::vector<int32_t> topk_;
  int instances_ = 1;
  size_t next_ = 0;
};

LayerConfig deepseek(int heads) {
  LayerConfig c;
  c.num_heads = heads;
  c.num_kv_heads = 1;
  c.head_size = 576;
  c.head_size_v = 512;
  c.use_mla = true;
  c.kv_lora_rank = 512;
  c.qk_rope_head_dim = 64;
  c.qk_nope_head_dim = 128;
  c.v_head_dim = 128;
  return c;
}

std::string shape_note(const Step& s) {
  return "H=" + std::to_string(s.cfg.num_heads) + " B=" + std::to_string(s.batch) + " ctx=" + std::to_string(s.context) +
         (s.query_len > 1 ? " q=" + std::to_string(s.query_len) : "") + (s.topk ? " topk=" + std::to_string(s.topk) : "") +
         " bf16 block=" + std::to_string(s.block_size);  // q / out dtype
}

}  // namespace

std::vector<BenchFigure> mla_bench_figures(bool quick, double dram_gbps, int threads) {
  std::vector<BenchFigure> f;
  const int reps = quick ? 3 : 7;

  // MLA decode, DeepSeek heads per rank (16: TP 8, 128: one rank): latent bytes read ÷ time vs
  // DRAM, and vs the roofline min(DRAM, product peak / intensity), intensity = 2176·H / 1152
  // flop per latent byte (576 + 512 multiply-adds per token and head over 576 bf16 values).
  for (int heads : {16, 128}) {
    Step dec;
    dec.cfg = deepseek(heads);
    dec.backend = "cpu_mla";
    dec.batch = quick ? 4 : 8;
    dec.context = quick ? 4096 : 8192;
    dec.threads = threads;
    Bench bench(dec);
    const int used = attn::team_size(threads);
    const mla::Isa isa = mla::chosen_isa(detect_cpu());
    // Ceiling samples around the timed calls, so both see the same machine load.
    const double peak0 = mla::product_peak_gflops(isa, used, 3);
    const double dec_ms = bench.median_ms(heads > 16 ? std::max(3, reps - 2) : reps);
    const double peak1 = mla::product_peak_gflops(isa, used, 3);
    const double peak = std::max(peak0, peak1);
    const double latent_bytes = double(dec.batch) * dec.context * 576 * 2;
    const double gbs = latent_bytes / (dec_ms * 1e-3) / 1e9;
    const double intensity = 2176.0 * heads / 1152.0;
    const std::string key = heads == 16 ? "mla_decode" : "mla_decode_h" + std::to_string(heads);
    f.push_back({key + ".ms", dec_ms, "ms", shape_note(dec) + " kernel " + bench.variant()});
    f.push_back({key + ".gbs", gbs, "GB/s", "latent cache bytes read / time"});
    if (dram_gbps > 0) f.push_back({key + ".fraction_of_dram", gbs / dram_gbps, "fraction",
                                       "of the DRAM read ceiling; the roofline below is the reachable bound"});
    if (peak > 0) {
      f.push_back({key + ".product_gflops", peak, "GFLOP/s",
                   std::string(isa == mla::Isa::avx512_bf16 ? "vdpbf16ps" : "fp32 FMA") + " peak, this run"});
      const double roof = dram_gbps > 0 ? std::min(dram_gbps, peak / intensity) : peak / intensity;
      f.push_back({key + ".fraction_of_roofline", gbs / roof, "fraction",
                   "roofline " + std::to_string(roof).substr(0, 5) + " GB/s = min(DRAM, peak / " +
                       std::to_string(intensity).substr(0, 5) + " flop/byte)"});
    }
  }

  // fp8_ds_mla entries (656 bytes per token) vs the bf16 latent (1152) in 16-head decode, calls
  // interleaved so both see the same machine load; bytes read = the cache's entries.
  {
    Step bf;
    bf.cfg = deepseek(16);
    bf.backend = "cpu_mla";
    bf.batch = quick ? 4 : 8;
    bf.context = quick ? 4096 : 8192;
    bf.threads = threads;
    Step ds = bf;
    ds.cfg.kv_cache_dtype = KVCacheDType::fp8_ds_mla;
    Bench bf_bench(bf), ds_bench(ds);
    std::vector<double> bf_ms, ds_ms;
    for (int r = 0; r < reps; ++r) bf_ms.push_back(bf_bench.median_ms(1)), ds_ms.push_back(ds_bench.median_ms(1));
    auto median = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
    const double bf_t = median(bf_ms), ds_t = median(ds_ms);
    const double tokens = double(ds.batch) * ds.context;
    f.push_back({"mla_decode_ds_mla.ms", ds_t, "ms", shape_note(ds) + " fp8_ds_mla kernel " + ds_bench.variant()});
    f.push_back({"mla_decode_ds_mla.bf16_ms", bf_t, "ms", "bf16 latent, same shape, interleaved, kernel " + bf_bench.variant()});
    f.push_back({"mla_decode_ds_mla.gbs", tokens * ds_mla::kEntryBytes / (ds_t * 1e-3) / 1e9, "GB/s",
                 "656-byte entries read / time"});
    f.push_back({"mla_decode_ds_mla.bytes_ratio", double(ds_mla::kEntryBytes) / (576 * 2), "fraction", "entry bytes vs bf16"});
    f.push_back({"mla_decode_ds_mla.speedup_vs_bf16", bf_t / ds_t, "x", "bf16 time / fp8_ds_mla time"});
  }

  // Sparse decode (DeepSeek-V3.2: 128 heads, top-2048) vs dense decode at the same context.
  Step sp;
  sp.cfg = deepseek(quick ? 16 : 128);
  sp.cfg.use_sparse = true;
  sp.cfg.index_topk = 2048;
  sp.backend = "cpu_sparse";
  sp.batch = 2;
  sp.context = quick ? 16384 : 32768;
  sp.topk = 2048;
  sp.threads = threads;
  Step dn = sp;
  dn.cfg.use_sparse = false;
  dn.cfg.index_topk = 0;
  dn.backend = "cpu_mla";
  dn.topk = 0;
  const double sp_ms = Bench(sp).median_ms(reps), dn_ms = Bench(dn).median_ms(reps);
  f.push_back({"sparse_decode.ms", sp_ms, "ms", shape_note(sp)});
  f.push_back({"sparse_decode.dense_ms", dn_ms, "ms", "cpu_mla at the same context"});
  f.push_back({"sparse_decode.speedup_vs_dense", dn_ms / sp_ms, "x",
               "context/topk = " + std::to_string(sp.context / sp.topk) + " is the ideal"});

  // Block-sparse prefill (Phi-3-small pattern: block 64, 16 local, stride 8) vs dense.
  Step bs;
  bs.cfg.num_heads = 8;
  bs.cfg.num_kv_heads = 2;
  bs.cfg.head_size = 128;
  bs.cfg.use_block_sparse = true;
  bs.cfg.bs_block_size = 64;
  bs.cfg.bs_local_blocks = 16;
  bs.cfg.bs_vert_stride = 8;
  bs.backend = "cpu_blocksparse";
  bs.context = 0;
  bs.query_len = quick ? 4096 : 8192;
  bs.block_size = 16;
  bs.threads = threads;
  Step bd = bs;
  bd.cfg.bs_local_blocks = 1 << 20;  // every block kept: the same kernel, dense
  const double bs_ms = Bench(bs).median_ms(quick ? 1 : 3), bd_ms = Bench(bd).median_ms(quick ? 1 : 3);
  double kept = 0, all = 0;
  const blocksparse::Pattern pat{64, 16, 8};
  for (int p = 0; p < bs.query_len; ++p) kept += double(blocksparse::visible_keys(pat, p)), all += p + 1;
  f.push_back({"blocksparse_prefill.ms", bs_ms, "ms", "H=8 Hkv=2 d=128 len=" + std::to_string(bs.query_len) + " bf16"});
  f.push_back({"blocksparse_prefill.dense_ms", bd_ms, "ms", "same kernel, no block masked"});
  f.push_back({"blocksparse_prefill.speedup_vs_dense", bd_ms / bs_ms, "x",
               "kept fraction of causal keys = " + std::to_string(kept / all)});
  return f;
}

}  // namespace attn::testkit
