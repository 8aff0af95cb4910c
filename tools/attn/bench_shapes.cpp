#include "bench_shapes.hpp"

#include <string>

namespace attn_cli {

std::string kv_suffix(attn::KVCacheDType kv) {
  using attn::KVCacheDType;
  switch (kv) {
    case KVCacheDType::auto_: return "_bf16";
    case KVCacheDType::fp8_e4m3: return "_fp8";
    default: break;
  }
  std::string s = "_";  // appended, not "_" + name: GCC 12's -Wrestrict misfires on that form
  s += attn::to_string(kv);
  return s;
}

const std::vector<attn::KVCacheDType>& quantized_kv_dtypes() {
  using K = attn::KVCacheDType;
  static const std::vector<K> v = {K::fp8_e4m3, K::int8_per_token_head, K::fp8_per_token_head, K::int4_per_token_head,
                                   K::nvfp4, K::nvfp4_4over6, K::turboquant_k8v4, K::turboquant_4bit_nc,
                                   K::turboquant_k3v4_nc, K::turboquant_3bit_nc};
  return v;
}

namespace {

using attn::KVCacheDType;
using attn_bench::Shape;

std::vector<KVCacheDType> with_bf16() {
  std::vector<KVCacheDType> v{KVCacheDType::auto_};
  for (KVCacheDType kv : quantized_kv_dtypes()) v.push_back(kv);
  return v;
}

void add_llama(std::vector<Shape>& out, bool quick) {
  for (int b : {1, 8})
    for (int ctx : {4096, 16384})
      for (KVCacheDType kv : with_bf16()) {
        if (quick && (b != 1 || ctx != 4096)) continue;
        Shape s;
        s.name = std::string("llama8b_decode_b") + std::to_string(b) + "_ctx" + std::to_string(ctx) + kv_suffix(kv);
        s.batch = b, s.context = ctx, s.kv = kv;
        out.push_back(s);
      }
  // Prefill with each cache (the quantized ones in the full run only).
  for (KVCacheDType kv : with_bf16()) {
    if (quick && kv != KVCacheDType::auto_) continue;
    Shape p;
    p.query_len = quick ? 512 : 2048, p.context = 0, p.kv = kv;
    p.name = std::string("llama8b_prefill_") + std::to_string(p.query_len) + kv_suffix(kv);
    out.push_back(p);
  }
}

void add_gptoss(std::vector<Shape>& out, bool quick) {
  Shape g;  // gpt-oss-20b: 64 q heads, 8 KV heads, head size 64, sinks, window 128
  g.heads = 64, g.kv_heads = 8, g.head_size = 64, g.window = 128, g.sinks = true;
  g.batch = quick ? 1 : 8, g.context = 4096;
  g.name = std::string("gptoss20b_swa_decode_b") + std::to_string(g.batch) + "_ctx4096_bf16";
  out.push_back(g);
  g.batch = 1, g.context = 0, g.query_len = quick ? 512 : 2048;
  g.name = std::string("gptoss20b_swa_prefill_") + std::to_string(g.query_len) + "_bf16";
  out.push_back(g);
}

// Decode cost per KV byte depends on how many query heads share a KV head (GQA) and on the
// row length; Llama-3.1-8B already covers head 128 at GQA 4.
void add_decode_grid(std::vector<Shape>& out) {
  for (int head : {64, 128, 256})
    for (int gqa : {4, 8}) {
      if (head == 128 && gqa == 4) continue;
      Shape s;
      s.kv_heads = 8, s.heads = 8 * gqa, s.head_size = head, s.batch = 8, s.context = 4096;
      s.name = std::string("h") + std::to_string(head) + "_gqa" + std::to_string(gqa) + "_decode_b8_ctx4096_bf16";
      out.push_back(s);
    }
}

}  // namespace

std::vector<Shape> bench_shapes(bool quick) {
  std::vector<Shape> out;
  add_llama(out, quick);
  add_gptoss(out, quick);
  if (!quick) add_decode_grid(out);
  return out;
}

}  // namespace attn_cli
