// cpu_flash: the production CPU backend. Descriptor (capabilities as data) and the forward
// entry point: validate, plan, run the work items on all threads, merge split KV ranges.
#include <omp.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "attn/backend.hpp"
#include "attn/error.hpp"
#include "backends/cpu_dense_descriptor.hpp"
#include "backends/cpu_flash/decode.hpp"
#include "backends/cpu_flash/head_sizes.hpp"
#include "backends/cpu_flash/isa.hpp"
#include "backends/cpu_flash/plan.hpp"
#include "backends/cpu_flash/prefill_run.hpp"
#include "cpu/threads.hpp"

namespace attn {
namespace cpu_flash {
namespace {

/// The step plan: work items and merges (plan.hpp) and the packed-K/V layout of the prefill
/// tiles, with the workspace they need: [partials | packed tiles].
class FlashStepPlan final : public StepPlan {
 public:
  FlashStepPlan(const LayerConfig& c, const BatchMetadata& md, const KVCacheSpec& spec, Plan plan, prefill::PackLayout pack)
      : StepPlan("cpu_flash", c, md, spec), plan_(std::move(plan)), pack_(std::move(pack)) {
    for (const WorkItem& it : plan_.items) max_rows_ = std::max(max_rows_, item_rows(it, c.num_heads / c.num_kv_heads));
  }
  const Plan& items() const { return plan_; }
  /// Rows of the largest work item: what each thread's kernel scratch is grown to before a run.
  int max_rows() const { return max_rows_; }
  const prefill::PackLayout& pack() const { return pack_; }
  std::size_t pack_offset() const { return (std::size_t(plan_.partial_floats) * sizeof(float) + 63) / 64 * 64; }
  std::size_t workspace_bytes() const override { return pack_offset() + std::size_t(pack_.bytes); }
  std::string to_string() const override { return StepPlan::to_string() + "\n" + plan_.to_string(); }

 private:
  Plan plan_;
  prefill::PackLayout pack_;
  int max_rows_ = 0;
};

class CpuFlashImpl final : public AttentionImpl {
 public:
  explicit CpuFlashImpl(const LayerParams& p)
      : AttentionImpl("cpu_flash", p), isa_(layer_isa(isa_for_variant(p.variant, detect_cpu()), p.config)),
        tile_isa_(tile_isa(isa_, !p.variant.empty())),
        variant_(to_string(isa_)) {
    params_.validate();
    const LayerConfig& c = params_.config;
    require(supports_head_size(c.head_size), "head_size", c.head_size, "one of " + head_size_rule().describe() + " (cpu_flash)");
    require(c.effective_head_size_v() == c.head_size, "head_size_v", c.effective_head_size_v(),
            "equal to head_size " + std::to_string(c.head_size) + " (cpu_flash)");
    if (c.use_alibi && params_.alibi_slopes.empty()) params_.alibi_slopes = alibi_slopes(c.num_heads);
  }

  std::shared_ptr<const StepPlan> plan(const BatchMetadata& md, const KVCacheSpec& spec) const override {
    check_plan_args(params_, md, spec);
    ATTN_REQUIRE(spec.layout != KVLayout::MLA, "cache.layout", to_string(spec.layout), "NHD, HND or HND_PAIRS (cpu_flash)");
    KernelArgs shape = args_for(spec);
    shape.causal = md.causal;
    Plan items = make_plan(md, PlanShape{shape.group, shape.num_kv_heads, shape.head_size_v, shape.window, shape.causal,
                                         mm_ranges(md)});
    prefill::PackLayout pack = prefill::plan_for(shape, items, tile_isa_, prefill_route_);
    return std::make_shared<FlashStepPlan>(params_.config, md, spec, std::move(items), std::move(pack));
  }

  RunResult run(const StepPlan& step, const ForwardArgs& args) const override {
    begin_run(step, args);
    const auto& fp = static_cast<const FlashStepPlan&>(step);  // begin_run checked it is cpu_flash's
    const BatchMetadata& md = step.metadata();
    KernelArgs a = args_for(args.cache->spec());
    a.q = args.q.data, a.q_dtype = args.q.dtype, a.q_tok_stride = args.q.strides[0], a.q_head_stride = args.q.strides[1];
    a.out = args.out.data, a.out_dtype = args.out.dtype, a.o_tok_stride = args.out.strides[0], a.o_head_stride = args.out.strides[1];
    a.kv = args.cache->view();
    a.query_start_loc = md.query_start_loc.data();
    a.seq_lens = md.seq_lens.data();
    a.block_table = md.block_table.data();
    a.max_blocks_per_seq = md.max_blocks_per_seq;
    a.causal = md.causal;
    a.mm_ranges = mm_ranges(md);

    Workspace own;
    char* ws = static_cast<char*>(scratch(args, own, fp.workspace_bytes()));
    float* partials = reinterpret_cast<float*>(ws);
    const Plan& plan = fp.items();
    const ItemFn fn = kernel_for(isa_, a.kv_type, a.q_dtype);
    const ItemFn decode = decode_kernel_for(isa_, a);
    const int threads = cpu::team_size(params_.num_threads);
    const int64_t n = int64_t(plan.items.size());
    const prefill::Call prefill_call(a, fp.pack(), ws + fp.pack_offset(), threads);  // packs K/V for the prefill tiles
#pragma omp parallel num_threads(threads)
    {
      // Every thread's kernel scratch is grown to the step's largest item before any item runs,
      // whichever items the dynamic schedule then hands it: a warm run allocates nothing.
      reserve_item_scratch(fp.max_rows(), a.head_size, a.head_size_v);
      prefill_call.reserve(a, fp.max_rows());
#pragma omp for schedule(dynamic, 1)
      for (int64_t i = 0; i < n; ++i) {
        const WorkItem& it = plan.items[std::size_t(i)];
        if (prefill_call.run(a, it)) continue;
        (decode && !it.mm && item_rows(it, a.group) <= kDecodeMaxRows ? decode : fn)(a, it, partials);
      }
    }
    if (!plan.merges.empty()) run_merges(a, plan, partials, threads);
    return {variant_, {}};
  }

  std::string variant() const override { return variant_; }

 private:
  /// The step's multimodal prefix ranges when this layer reads them (use_mm_prefix), else null.
  const int32_t* mm_ranges(const BatchMetadata& md) const {
    return params_.config.use_mm_prefix && !md.mm_prefix_ranges.empty() ? md.mm_prefix_ranges.data() : nullptr;
  }
  /// The kernel arguments that depend only on the layer and the cache geometry (no data).
  KernelArgs args_for(const KVCacheSpec& spec) const {
    const LayerConfig& c = params_.config;
    KernelArgs a;
    a.q_dtype = c.dtype;
    // int4 and nvfp4 codes are unpacked per chunk into bf16 rows (exact), which the bf16 kernels read.
    // turboquant slots are unpacked into fp32 rows (centroids · norm / |c| and code · scale + min).
    a.kv_type = spec.int4() || spec.nvfp4() ? KvType::bf16 : spec.turboquant() ? KvType::f32 : kv_type_of(spec.dtype);
    a.kv_elem_bytes = int64_t(dtype_size(spec.dtype));
    a.token_scales = spec.token_scales();
    a.int4 = spec.int4();
    a.turboquant = spec.turboquant();
    if (a.turboquant) a.kv.tq = turboquant::format_of(spec.kv_cache_dtype);  // the plan's tile layout depends on the preset
    a.num_heads = c.num_heads, a.num_kv_heads = c.num_kv_heads, a.group = c.num_heads / c.num_kv_heads;
    a.head_size = c.head_size, a.head_size_v = spec.v_width();
    a.scale = params_.effective_scale();
    a.soft_cap = c.logits_soft_cap;
    a.window = c.sliding_window;
    a.alibi_slopes = c.use_alibi ? params_.alibi_slopes.data() : nullptr;
    a.sinks = c.has_sink ? params_.sinks.data() : nullptr;
    return a;
  }

  Isa isa_;
  Isa tile_isa_;  // the prefill tiles' build: isa_, or avx512 where bf16 dot products do not pay
  std::string variant_;
  prefill::Route prefill_route_ = prefill::route_from_env();
};

}  // namespace
}  // namespace cpu_flash

BackendDescriptor cpu_flash_descriptor() {
  // Every format: int4 in the rotated space, nvfp4 rows unpacked to bf16, turboquant slots to fp32
  // rows with q rotated once (per chunk into scratch rows, in the decode kernel and the general one).
  BackendDescriptor d = cpu_dense_every_format_descriptor(
      "cpu_flash", "flash attention on the paged cache: GQA-shared K/V loads, split-KV decode, SIMD chosen at run time",
      cpu_flash::head_size_rule());
  // Plans depend on each sequence alone and every item runs alone in a fixed order
  // (proven by the batch-invariance tests in tests/).
  d.caps.batch_invariance = true;
  d.caps.attn_types = {AttnType::decoder, AttnType::encoder, AttnType::encoder_only, AttnType::encoder_decoder};
  d.priority = 10;
  // Head-major blocks, each (block, KV head) one contiguous run of K and one of V, ordered in
  // pairs for the pair kernels' bf16 dot products: bf16 q on bf16, fp8 or int8 storage (fp8,
  // int8 and int4 codes widen exactly to bf16; per-token-head scales apply to scores and weights). The pair kernels need AVX-512 BF16; elsewhere (AVX2) the general kernel
  // would gather every pair back into rows (3-4 % of DRAM speed), so those caches keep HND rows,
  // as do other dtypes and sizes the pairs do not fit. NHD and HND caches an engine brings are
  // served as well.
  d.kv_layout = KVLayout::HND_PAIRS;
  d.kv_layout_rule = KVLayoutRule{.q_dtypes = {DType::bfloat16},
                                  .storage_dtypes = {DType::bfloat16, DType::fp8_e4m3, DType::fp8_e5m2, DType::int8},
                                  .otherwise = KVLayout::HND,
                                  .cpu_features = {CpuFeature::avx512_bf16}};
  d.preferred_block_size = 64;
  // The build the layer's kernels run (fp32 q on an AVX-512 BF16 machine runs the avx512 one).
  d.variant = [](const Platform& p, const LayerConfig& c) {
    return std::string(cpu_flash::to_string(cpu_flash::layer_isa(cpu_flash::chosen_isa(p), c)));
  };
  d.variants = cpu_flash::isa_variants;
  d.create = [](const LayerParams& p) -> std::unique_ptr<AttentionImpl> { return std::make_unique<cpu_flash::CpuFlashImpl>(p); };
  return d;
}

}  // namespace attn
