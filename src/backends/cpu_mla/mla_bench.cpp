// Benchmark workloads for cpu_mla / cpu_sparse / cpu_blocksparse (see attn/mla_bench.hpp).
// Caches are filled with random values directly and several disjoint instances of each batch
// are cycled, so a timed call reads memory the previous call did not leave in the cache.
#include "attn/mla_bench.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>

#include "attn/attn.hpp"
#include "attn/sparse.hpp"
#include "backends/cpu_sparse/blocksparse_forward.hpp"

namespace attn {
namespace {

using Clock = std::chrono::steady_clock;

struct Step {
  LayerConfig cfg;
  std::string backend;
  int batch = 1, context = 0, query_len = 1, block_size = 64, topk = 0;
  int threads = 0;
  size_t pool_bytes = size_t(1) << 29;
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
    const size_t block_bytes = size_t(st.block_size) * probe.num_kv_heads * (probe.head_size + (probe.layout == KVLayout::MLA ? 0 : probe.v_width())) * dtype_size(probe.dtype);
    const size_t instance_bytes = block_bytes * blocks_per_seq * st.batch;
    instances_ = int(std::max<size_t>(1, std::min<size_t>(16, st.pool_bytes / instance_bytes)));
    cache_ = std::make_unique<KVCache>(desc->cache_spec(st.cfg, blocks_per_seq * st.batch * instances_, st.block_size));
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    uint16_t* data = static_cast<uint16_t*>(cache_->data());
    for (size_t i = 0; i < cache_->bytes() / 2; ++i) data[i] = f32_to_bf16(uni(rng));
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
      if (!topk_.empty())
        dynamic_cast<TopkSparseAttention&>(*impl_).set_topk_indices(
            TensorView::contiguous(topk_.data(), DType::int32, {md.num_tokens, st_.topk}));
      const auto t0 = Clock::now();
      impl_->forward(q_.view(), *cache_, md, out_.view());
      const double dt = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (r > 0) ms.push_back(dt);  // the first call warms up
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }

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
         " bf16 block=" + std::to_string(s.block_size);
}

}  // namespace

std::vector<BenchFigure> mla_bench_figures(bool quick, double dram_gbps, int threads) {
  std::vector<BenchFigure> f;
  const int reps = quick ? 3 : 7;

  // MLA decode (DeepSeek-V2-Lite heads): latent bytes read ÷ time vs DRAM.
  Step dec;
  dec.cfg = deepseek(16);
  dec.backend = "cpu_mla";
  dec.batch = quick ? 4 : 8;
  dec.context = quick ? 4096 : 8192;
  dec.threads = threads;
  dec.pool_bytes = quick ? size_t(256) << 20 : size_t(1) << 30;
  const double dec_ms = Bench(dec).median_ms(reps);
  const double latent_bytes = double(dec.batch) * dec.context * 576 * 2;
  const double gbs = latent_bytes / (dec_ms * 1e-3) / 1e9;
  f.push_back({"mla_decode.ms", dec_ms, "ms", shape_note(dec)});
  f.push_back({"mla_decode.gbs", gbs, "GB/s", "latent cache bytes read / time"});
  if (dram_gbps > 0) f.push_back({"mla_decode.fraction_of_dram", gbs / dram_gbps, "fraction", "target >= 0.70"});

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
  sp.pool_bytes = size_t(256) << 20;
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
  bs.pool_bytes = size_t(64) << 20;
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

}  // namespace attn
