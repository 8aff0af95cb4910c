// Harness: what the Python constructors reach on the C++ side: KVCacheSpec and KVCache with
// fuzzed dims, Buffer with fuzzed shapes, LayerConfig::validate with fuzzed fields. Buffers are
// made when their true size (computed here without overflow) is small, and also when it
// overflows int64: the constructor must refuse those with an Error rather than wrap around.
#include <vector>

#include "attn/attn.hpp"
#include "fuzz/fuzz_input.hpp"
#include "fuzz/harnesses.hpp"

namespace attn::fuzz {
namespace {

/// Elements × element size as the mathematics says, saturated far above any real allocation.
struct TrueSize {
  bool overflows_int64 = false;
  int64_t bytes = 0;  // valid when !overflows_int64 and every extent >= 0
  bool negative = false;
};

TrueSize true_size(const std::vector<int64_t>& shape, DType dtype) {
  TrueSize t;
  __int128 n = int64_t(dtype_size(dtype));
  for (int64_t e : shape) {
    if (e < 0) t.negative = true;
    n *= e < 0 ? -__int128(e) : __int128(e);
    if (n > __int128(INT64_MAX)) {
      t.overflows_int64 = true;
      n = __int128(INT64_MAX) + 1;  // stays saturated: later factors cannot bring it back
    }
  }
  if (!t.overflows_int64) t.bytes = int64_t(n);
  return t;
}

bool worth_allocating(const TrueSize& t) { return t.negative || t.overflows_int64 || t.bytes <= kMaxHarnessBytes; }

DType any_dtype(FuzzInput& in) {
  const auto& all = all_dtypes();
  return all[std::size_t(in.pick(int(all.size())))];
}

int64_t extent(FuzzInput& in, bool raw) { return raw ? in.i64() : in.small(-1, 40); }

void buffer_case(FuzzInput& in, bool raw) {
  std::vector<int64_t> shape(std::size_t(in.small(0, TensorView::kMaxDims + 1)));
  for (auto& e : shape) e = extent(in, raw);
  const DType dtype = any_dtype(in);
  if (!worth_allocating(true_size(shape, dtype))) return;
  Buffer b(dtype, shape);
  const TensorView v = b.view();
  (void)v.shape_string();
  if (v.numel() > 0) store_from_float(b.data(), dtype, v.numel() - 1, 1.0f);  // the last element is writable
}

void cache_case(FuzzInput& in, bool raw) {
  KVCacheSpec spec;
  spec.num_blocks = raw ? in.i32() : in.small(-1, 16);
  spec.block_size = raw ? in.i32() : in.small(-1, 32);
  spec.num_kv_heads = raw ? in.i32() : in.small(-1, 8);
  spec.head_size = raw ? in.i32() : in.small(-1, 160);
  spec.head_size_v = raw ? in.i32() : in.small(-1, 160);
  spec.dtype = any_dtype(in);
  spec.kv_cache_dtype = all_kv_cache_dtypes()[std::size_t(in.pick(int(all_kv_cache_dtypes().size())))];
  spec.layout = KVLayout(in.pick(3));
  spec.per_head_scales = in.flag();
  (void)spec.to_string();
  const std::vector<int64_t> shape = spec.shape();
  if (!worth_allocating(true_size(shape, spec.dtype))) return;
  KVCache cache(spec);
  const PagedKV v = cache.view();
  (void)v;
  std::vector<float> ks(std::size_t(in.small(0, 9)), 1.5f), vs(ks.size(), 0.5f);
  cache.set_scales(ks, vs);
  if (spec.num_blocks > 1) cache.copy_block(in.small(-1, 2), in.small(-1, 2));
  cache.fill(0.0f);
}

void layer_config_case(FuzzInput& in, bool raw) {
  LayerConfig c;
  auto field = [&](int lo, int hi) { return raw ? in.i32() : in.small(lo, hi); };
  c.num_heads = field(-1, 64);
  c.num_kv_heads = field(-1, 16);
  c.head_size = field(-1, 600);
  c.head_size_v = field(-1, 600);
  c.dtype = any_dtype(in);
  c.kv_cache_dtype = all_kv_cache_dtypes()[std::size_t(in.pick(int(all_kv_cache_dtypes().size())))];
  c.attn_type = all_attn_types()[std::size_t(in.pick(int(all_attn_types().size())))];
  c.block_size = field(-1, 64);
  c.sliding_window = field(-1, 64);
  const float caps[] = {0.0f, 30.0f, -1.0f, 1e30f, __builtin_inff(), __builtin_nanf("")};
  c.logits_soft_cap = caps[in.pick(6)];
  c.use_alibi = in.flag();
  c.has_sink = in.flag();
  c.use_mla = in.flag();
  c.use_sparse = in.flag();
  c.use_block_sparse = in.flag();
  c.bs_block_size = field(-1, 64);
  c.bs_local_blocks = field(-1, 8);
  c.bs_vert_stride = field(-1, 8);
  c.kv_lora_rank = field(-1, 512);
  c.qk_rope_head_dim = field(-1, 64);
  c.qk_nope_head_dim = field(-1, 128);
  c.v_head_dim = field(-1, 128);
  c.index_topk = field(-1, 2048);
  c.use_non_causal = in.flag();
  c.is_attention_free = in.flag();
  (void)c.to_string();
  c.validate();
  (void)c.effective_head_size_v();
}

}  // namespace

int constructors(const uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  const int which = in.pick(3);
  const bool raw = in.flag();
  try {
    if (which == 0) buffer_case(in, raw);
    else if (which == 1) cache_case(in, raw);
    else layer_config_case(in, raw);
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace attn::fuzz
