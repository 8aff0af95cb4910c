// Harness: BatchMetadata (built from sequence specs, or assembled by hand and validated) and
// one write_kv + forward on cpu_flash or reference with tiny heads. Raw mode feeds full-range
// 32/64-bit lengths, block sizes and ids, so overflow in the length arithmetic is reachable;
// the harness itself only bounds what it allocates (tokens, cache blocks).
#include <algorithm>
#include <memory>
#include <vector>

#include "attn/attn.hpp"
#include "fuzz/fuzz_input.hpp"
#include "fuzz/harnesses.hpp"

namespace attn::fuzz {
namespace {

constexpr int64_t kMaxTokens = 2048;
constexpr int32_t kMaxCacheBlocks = 64;
constexpr int32_t kMaxCacheBlockSize = 32;  // small caches keep the run at hundreds of inputs/s under ASan

BatchMetadata built(FuzzInput& in, bool raw, int32_t block_size, int32_t num_blocks) {
  std::vector<SequenceSpec> seqs(std::size_t(in.small(1, 4)));
  __int128 tokens = 0;
  for (auto& s : seqs) {
    s.context_len = raw ? in.i64() : in.small(0, 40);
    s.query_len = raw ? in.i64() : in.small(0, 12);
    tokens += s.query_len;
    const int n = in.small(0, 8);
    for (int b = 0; b < n; ++b) s.block_ids.push_back(raw ? in.i32() : in.small(-1, 47));
  }
  // slot_mapping holds one entry per token: more than kMaxTokens is a legal request the harness
  // does not make, not a case build() must refuse.
  if (tokens > kMaxTokens) throw Error("fuzz: more tokens than the harness allocates");
  return BatchMetadata::build(seqs, block_size, num_blocks, in.flag());
}

std::vector<int32_t> ints32(FuzzInput& in, bool raw, int n, int lo, int hi) {
  std::vector<int32_t> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = raw ? in.i32() : in.small(lo, hi);
  return v;
}

BatchMetadata hand_made(FuzzInput& in, bool raw, int32_t block_size, int32_t num_blocks) {
  BatchMetadata md;
  md.num_seqs = raw ? in.i32() : in.small(0, 4);
  md.num_tokens = raw ? in.i32() : in.small(0, 40);
  md.block_size = block_size;
  md.max_blocks_per_seq = raw ? in.i32() : in.small(0, 8);
  md.max_query_len = raw ? in.i32() : in.small(0, 40);
  md.max_seq_len = raw ? in.i32() : in.small(0, 80);
  md.causal = in.flag();
  // Vector sizes are fuzzed separately from the counts above: validate() must notice a mismatch.
  md.query_start_loc = ints32(in, raw, in.small(0, 6), 0, 40);
  md.seq_lens = ints32(in, raw, in.small(0, 5), 0, 80);
  md.block_table = ints32(in, raw, in.small(0, 32), -1, 47);
  const int slots = in.small(0, 48);
  for (int i = 0; i < slots; ++i) md.slot_mapping.push_back(raw ? in.i64() : in.small(-1, 400));
  md.validate(num_blocks, block_size);
  return md;
}

void fill(Buffer& b, FuzzInput& in) {
  const int64_t n = b.view().numel();
  const uint8_t seed = in.byte();
  for (int64_t i = 0; i < n; ++i) store_from_float(b.data(), b.dtype(), i, float(int((i * 37 + seed) % 17) - 8) * 0.125f);
}

}  // namespace

int metadata_forward(const uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  const bool raw = in.flag();
  const bool by_hand = in.flag();
  const std::string backend = in.flag() ? "reference" : "cpu_flash";
  try {
    const int32_t block_size = raw ? in.i32() : int32_t(1) << in.small(0, 5);
    const int32_t num_blocks = raw ? in.i32() : in.small(1, 48);
    const BatchMetadata md = by_hand ? hand_made(in, raw, block_size, num_blocks) : built(in, raw, block_size, num_blocks);
    (void)md.to_string();
    if (md.num_tokens < 0 || md.num_tokens > kMaxTokens) return 0;

    LayerConfig cfg;
    constexpr DType kDTypes[] = {DType::float32, DType::float16, DType::bfloat16};
    cfg.dtype = kDTypes[in.pick(3)];
    cfg.num_kv_heads = in.small(1, 2);
    cfg.num_heads = cfg.num_kv_heads * in.small(1, 2);
    constexpr int kHeadSizes[] = {32, 40, 64};
    cfg.head_size = kHeadSizes[in.pick(3)];
    cfg.sliding_window = in.small(0, 3) == 0 ? in.small(1, 9) : 0;
    cfg.logits_soft_cap = in.flag() ? 30.0f : 0.0f;
    cfg.has_sink = in.flag();
    cfg.kv_cache_dtype = in.small(0, 3) == 0 ? KVCacheDType::fp8 : KVCacheDType::auto_;
    cfg.validate();
    LayerParams params;
    params.config = cfg;
    params.num_threads = 1;
    if (cfg.has_sink) params.sinks.assign(std::size_t(cfg.num_heads), 0.5f);
    auto impl = Registry::instance().create(backend, params);

    // The cache the kernels read: the metadata's own geometry when it is small enough to
    // allocate, else a small one, which forward() must then refuse as not matching.
    const auto desc = Registry::instance().find(backend);
    const int32_t cache_blocks = std::clamp(num_blocks, 1, kMaxCacheBlocks);
    const int32_t cache_block_size = std::clamp(block_size, 1, kMaxCacheBlockSize);
    KVCache cache(desc->cache_spec(cfg, cache_blocks, cache_block_size));

    const int64_t T = md.num_tokens, H = cfg.num_heads, Hkv = cfg.num_kv_heads, D = cfg.head_size;
    Buffer q(cfg.dtype, {T, H, D}), k(cfg.dtype, {T, Hkv, D}), v(cfg.dtype, {T, Hkv, D}), out(cfg.dtype, {T, H, D});
    fill(q, in);
    fill(k, in);
    fill(v, in);
    impl->write_kv(k.view(), v.view(), cache, md);
    impl->forward(q.view(), cache, md, out.view());
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace attn::fuzz
