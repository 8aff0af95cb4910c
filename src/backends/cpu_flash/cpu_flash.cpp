// cpu_flash: the production CPU backend. Descriptor (capabilities as data) and the forward
// entry point: validate, plan, run the work items on all threads, merge split KV ranges.
#include <omp.h>

#include <memory>
#include <vector>

#include "attn/backend.hpp"
#include "attn/error.hpp"
#include "backends/cpu_flash/decode.hpp"
#include "backends/cpu_flash/head_sizes.hpp"
#include "backends/cpu_flash/isa.hpp"
#include "backends/cpu_flash/plan.hpp"

namespace attn {
namespace cpu_flash {
namespace {

class CpuFlashImpl final : public AttentionImpl {
 public:
  explicit CpuFlashImpl(const LayerParams& p) : p_(p), isa_(chosen_isa(detect_cpu())) {
    p_.validate();
    const LayerConfig& c = p_.config;
    require(supports_head_size(c.head_size), "head_size", c.head_size, "one of " + head_size_rule().describe() + " (cpu_flash)");
    require(c.effective_head_size_v() == c.head_size, "head_size_v", c.effective_head_size_v(),
            "equal to head_size " + std::to_string(c.head_size) + " (cpu_flash)");
    if (c.use_alibi && p_.alibi_slopes.empty()) p_.alibi_slopes = alibi_slopes(c.num_heads);
  }

  void forward(const TensorView& q, const KVCache& cache, const BatchMetadata& md, const TensorView& out) override {
    check_forward_args(p_, q, cache, md, out);
    const LayerConfig& c = p_.config;
    const KVCacheSpec& spec = cache.spec();
    require(spec.layout != KVLayout::MLA, "cache.layout", to_string(spec.layout), "NHD or HND (cpu_flash)");

    KernelArgs a;
    a.q = q.data, a.q_dtype = q.dtype, a.q_tok_stride = q.strides[0], a.q_head_stride = q.strides[1];
    a.out = out.data, a.out_dtype = out.dtype, a.o_tok_stride = out.strides[0], a.o_head_stride = out.strides[1];
    a.kv = cache.view();
    a.kv_type = kv_type_of(a.kv.dtype);
    a.kv_elem_bytes = int64_t(dtype_size(a.kv.dtype));
    a.query_start_loc = md.query_start_loc.data();
    a.seq_lens = md.seq_lens.data();
    a.block_table = md.block_table.data();
    a.max_blocks_per_seq = md.max_blocks_per_seq;
    a.num_heads = c.num_heads, a.num_kv_heads = c.num_kv_heads, a.group = c.num_heads / c.num_kv_heads;
    a.head_size = c.head_size, a.head_size_v = a.kv.head_size_v ? a.kv.head_size_v : c.head_size;
    a.scale = p_.effective_scale();
    a.soft_cap = c.logits_soft_cap;
    a.window = c.sliding_window;
    a.causal = md.causal;
    a.alibi_slopes = c.use_alibi ? p_.alibi_slopes.data() : nullptr;
    a.sinks = c.has_sink ? p_.sinks.data() : nullptr;

    const Plan plan = make_plan(md, PlanShape{a.group, a.num_kv_heads, a.head_size_v, a.window, a.causal});
    std::vector<float> partials(std::size_t(plan.partial_floats));
    const ItemFn fn = kernel_for(isa_, a.kv_type, a.q_dtype);
    const ItemFn decode = decode_kernel_for(isa_, a.kv_type, a.q_dtype, a.head_size);
    const int threads = p_.num_threads > 0 ? p_.num_threads : omp_get_max_threads();
    const int64_t n = int64_t(plan.items.size());
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t i = 0; i < n; ++i) {
      const WorkItem& it = plan.items[std::size_t(i)];
      (decode && item_rows(it, a.group) <= kDecodeMaxRows ? decode : fn)(a, it, partials.data());
    }
    if (!plan.merges.empty()) run_merges(a, plan, partials.data(), threads);
  }

  std::string variant() const override { return std::string(to_string(isa_)); }

 private:
  LayerParams p_;
  Isa isa_;
};

}  // namespace
}  // namespace cpu_flash

BackendDescriptor cpu_flash_descriptor() {
  BackendDescriptor d;
  d.name = "cpu_flash";
  d.summary = "flash attention on the paged cache: GQA-shared K/V loads, split-KV decode, SIMD chosen at run time";
  Capabilities& c = d.caps;
  c.platforms = {PlatformKind::cpu};
  c.dtypes = {DType::float32, DType::float16, DType::bfloat16};
  c.kv_cache_dtypes = {KVCacheDType::auto_, KVCacheDType::float16, KVCacheDType::bfloat16, KVCacheDType::fp8,
                       KVCacheDType::fp8_e4m3, KVCacheDType::fp8_e5m2};
  c.head_sizes = cpu_flash::head_size_rule();
  c.block_sizes = SizeRule::any();
  c.sinks = c.sliding_window = c.soft_cap = c.alibi = c.non_causal = true;
  c.per_head_quant_scales = true;
  // Plans depend on each sequence alone and every item runs alone in a fixed order
  // (proven by the batch-invariance tests in tests/).
  c.batch_invariance = true;
  c.attn_types = {AttnType::decoder, AttnType::encoder, AttnType::encoder_only, AttnType::encoder_decoder};
  d.priority = 10;
  // Head-major blocks: each (block, KV head) is one contiguous run of K rows and one of V rows.
  d.kv_layout = KVLayout::HND;
  d.preferred_block_size = 64;
  d.variant = [](const Platform& p) { return std::string(cpu_flash::to_string(cpu_flash::chosen_isa(p))); };
  d.create = [](const LayerParams& p) -> std::unique_ptr<AttentionImpl> { return std::make_unique<cpu_flash::CpuFlashImpl>(p); };
  return d;
}

}  // namespace attn
