// CudaFlashAttention: plan (validation once per step, which sequences decode, how many KV splits,
// the metadata upload) and run (boundary checks, write of new K/V, the three launches: decode,
// prefill, merge), over a device-resident KVCache.
#include <algorithm>

#include "backends/cuda_flash/cuda_flash.hpp"
#include "backends/cuda_flash/kernels/params.hpp"
#include "backends/cuda_flash/limits.hpp"
#include "backends/cuda_flash/module/cuda_check.hpp"

namespace attn::cuda_flash {

namespace {

constexpr int kMaxSplits = 64;  // merge_kernel's bound

ElemKind elem_kind(DType d, const char* arg) {
  switch (d) {
    case DType::float16: return ElemKind::f16;
    case DType::bfloat16: return ElemKind::bf16;
    case DType::fp8_e4m3: return ElemKind::fp8_e4m3;
    case DType::float32: return ElemKind::f32;
    default: throw Error(std::string(arg) + ".dtype=" + std::string(to_string(d)) + " invalid: expected float16 or bfloat16");
  }
}

// check_tensor (the core's boundary check) on a device tensor, plus the 16-byte rules of the
// kernels' vector loads.
void check_device_tensor(const TensorView& t, const char* arg, std::initializer_list<DType> dtypes,
                         std::initializer_list<int64_t> extents, bool vector_loads) {
  ATTN_REQUIRE(t.device == DeviceKind::cuda, std::string(arg) + ".device", "cpu", "a CUDA tensor");
  TensorView shape_only = t;
  shape_only.device = DeviceKind::cpu;
  check_tensor(shape_only, arg, 3, dtypes, extents);
  if (vector_loads) {
    ATTN_REQUIRE(reinterpret_cast<uintptr_t>(t.data) % 16 == 0, std::string(arg) + ".data", t.data, "16-byte aligned");
    ATTN_REQUIRE(t.strides[0] % 8 == 0 && t.strides[1] % 8 == 0, std::string(arg) + ".strides",
                 std::to_string(t.strides[0]) + "," + std::to_string(t.strides[1]), "multiples of 8 elements");
  }
}

// Launch parameters of write_kv for new k / v into a device cache (slot_mapping on the device).
WriteKVParams write_params(const TensorView& k, const TensorView& v, const PagedKV& kv, const int64_t* slots,
                           int num_tokens, const LayerConfig& c) {
  WriteKVParams w;
  w.k = k.data;
  w.v = v.data;
  w.k_stride_t = k.strides[0];
  w.k_stride_h = k.strides[1];
  w.v_stride_t = v.strides[0];
  w.v_stride_h = v.strides[1];
  w.src_kind = elem_kind(k.dtype, "k");
  w.slot_mapping = slots;
  w.kv = kv.base;
  w.block_stride = kv.block_stride;
  w.token_stride = kv.token_stride;
  w.head_stride = kv.head_stride;
  w.v_offset = kv.v_offset;
  w.block_size = kv.block_size;
  w.k_scales = kv.k_scales;
  w.v_scales = kv.v_scales;
  w.num_tokens = num_tokens;
  w.num_kv_heads = c.num_kv_heads;
  w.head_size = c.head_size;
  return w;
}

void check_new_kv(const TensorView& k, const TensorView& v, int64_t num_tokens, const LayerConfig& c) {
  const auto dtypes = {DType::float32, DType::float16, DType::bfloat16};
  check_device_tensor(k, "k", dtypes, {num_tokens, c.num_kv_heads, c.head_size}, false);
  check_device_tensor(v, "v", dtypes, {num_tokens, c.num_kv_heads, c.head_size}, false);
  ATTN_REQUIRE(v.dtype == k.dtype, "v.dtype", to_string(v.dtype), std::string(to_string(k.dtype)) + " (k's dtype)");
}


}  // namespace


std::size_t CudaStepPlan::workspace_bytes() const {
  // Split-KV partials: [splits, tokens, heads, head_size] outputs + [splits, tokens, heads] LSEs.
  const std::size_t splits = std::size_t(std::max(decode_splits, 1));
  const std::size_t rows = std::size_t(metadata().num_tokens) * std::size_t(heads);
  return splits * rows * (std::size_t(head_size) + 1) * sizeof(float);
}

std::string CudaStepPlan::to_string() const {
  return StepPlan::to_string() + "; " + std::to_string(decode_count) + " decode seqs x " + std::to_string(decode_splits) +
         " KV splits of " + std::to_string(split_tokens) + " tokens, " + std::to_string(prefill_count) +
         " prefill seqs (max " + std::to_string(max_prefill_rows) + " query rows per CTA)";
}

CudaFlashAttention::CudaFlashAttention(const LayerParams& params) : AttentionImpl("cuda_flash", params, DeviceKind::cuda) {
  params_.validate();
  const LayerConfig& c = params_.config;
  require(c.dtype == DType::float16 || c.dtype == DType::bfloat16, "dtype", to_string(c.dtype), "float16 or bfloat16");
  require(c.head_size >= kMinHead && c.head_size <= kMaxHead && c.head_size % kHeadStep == 0, "head_size", c.head_size,
          std::to_string(kMinHead) + ".." + std::to_string(kMaxHead) + " step " + std::to_string(kHeadStep));
  require(c.effective_head_size_v() == c.head_size, "head_size_v", c.head_size_v, "0 or head_size");
  require(!c.use_alibi, "use_alibi", "true", "false (cuda_flash has no ALiBi)");
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  variant_ = "sm_" + std::to_string(prop.major * 10 + prop.minor) + " mma.sync (" + prop.name + ")";
  if (c.has_sink) {
    sinks_ = DeviceMemory(cuda_allocator(), params_.sinks.size() * sizeof(float));
    check_cuda(cudaMemcpy(sinks_.data(), params_.sinks.data(), params_.sinks.size() * sizeof(float), cudaMemcpyHostToDevice),
               "cudaMemcpy(sinks)");
  }
}

CudaFlashAttention::~CudaFlashAttention() = default;

std::string CudaFlashAttention::variant() const { return variant_; }

void CudaFlashAttention::synchronize() const { check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (kernels)"); }

std::shared_ptr<const StepPlan> CudaFlashAttention::plan(const BatchMetadata& md, const KVCacheSpec& cache) const {
  check_plan_args(params_, md, cache);
  const LayerConfig& c = params_.config;
  ATTN_REQUIRE(cache.layout == KVLayout::NHD || cache.layout == KVLayout::HND, "cache.layout", to_string(cache.layout),
               "NHD or HND (cuda_flash reads neither MLA nor HND_PAIRS caches)");
  ATTN_REQUIRE(md.num_seqs <= 65535, "md.num_seqs", md.num_seqs, "<= 65535 (one grid dimension)");
  auto p = std::make_shared<CudaStepPlan>(backend_, c, md, cache);
  p->heads = c.num_heads;
  p->head_size = c.head_size;
  p->split_tokens = kDecodeTileTokens;
  const int group = c.num_heads / c.num_kv_heads;
  const int heads_per_cta = std::min(group, kMaxHeadsPerCta);
  const int slices = (group + heads_per_cta - 1) / heads_per_cta;
  std::vector<int32_t> decode, prefill;
  int max_decode_len = 0;
  for (int s = 0; s < md.num_seqs; ++s) {
    const int q = md.query_len(s);
    if (q == 1) {
      decode.push_back(s);
      max_decode_len = std::max(max_decode_len, md.seq_lens[s]);
    } else if (q > 1) {
      prefill.push_back(s);
      p->max_prefill_rows = std::max(p->max_prefill_rows, q * heads_per_cta);
    }
  }
  p->decode_count = int(decode.size());
  p->prefill_count = int(prefill.size());
  // Flash-decoding: enough (split × sequence × head slice) CTAs to fill every SM about four
  // times, each split a whole number of tiles; the split count depends only on the batch, so
  // results are reproducible run to run.
  if (p->decode_count > 0 && max_decode_len > 0) {
    const int base = p->decode_count * c.num_kv_heads * slices;
    const int tiles = (max_decode_len + kDecodeTileTokens - 1) / kDecodeTileTokens;
    const int want = std::clamp((4 * sm_count_ + base - 1) / base, 1, std::min(kMaxSplits, tiles));
    const int per_split_tiles = (tiles + want - 1) / want;
    p->split_tokens = per_split_tiles * kDecodeTileTokens;
    p->decode_splits = (tiles + per_split_tiles - 1) / per_split_tiles;
  }
  std::vector<int32_t> token_seq(std::size_t(md.num_tokens)), seq_splits(std::size_t(md.num_seqs));
  for (int s = 0; s < md.num_seqs; ++s) {
    const int q = md.query_len(s);
    seq_splits[s] = q == 1 ? p->decode_splits : (q > 1 ? 1 : 0);
    for (int i = md.query_start_loc[s]; i < md.query_start_loc[s + 1]; ++i) token_seq[i] = s;
  }
  std::vector<int32_t> packed;
  auto append = [&](const std::vector<int32_t>& v) {
    const std::size_t off = packed.size();
    packed.insert(packed.end(), v.begin(), v.end());
    return off;
  };
  p->off_qsl = append(md.query_start_loc);
  p->off_seq_lens = append(md.seq_lens);
  p->off_table = append(md.block_table);
  p->off_token_seq = append(token_seq);
  p->off_splits = append(seq_splits);
  p->off_decode = append(decode);
  p->off_prefill = append(prefill);
  // Once per step: every layer run under this plan reads the same device copy.
  const std::shared_ptr<DeviceAllocator> gpu = cuda_allocator();
  p->device_metadata = DeviceMemory(gpu, std::max<std::size_t>(packed.size(), 1) * sizeof(int32_t));
  gpu->copy(p->device_metadata.data(), packed.data(), packed.size() * sizeof(int32_t), CopyKind::host_to_device);
  p->slot_mapping = DeviceMemory(gpu, std::max<std::size_t>(md.slot_mapping.size(), 1) * sizeof(int64_t));
  gpu->copy(p->slot_mapping.data(), md.slot_mapping.data(), md.slot_mapping.size() * sizeof(int64_t), CopyKind::host_to_device);
  return p;
}

RunResult CudaFlashAttention::run(const StepPlan& base_plan, const ForwardArgs& args) const {
  const LayerConfig& c = params_.config;
  const BatchMetadata& md = base_plan.metadata();
  const bool has_k = args.new_k.data || args.new_k.ndim, has_v = args.new_v.data || args.new_v.ndim;
  if (has_k) check_new_kv(args.new_k, args.new_v, md.num_tokens, c);
  // Plan, config and cache geometry; the cache is device-resident (its device is checked here).
  // New K/V are written below on the device, so begin_run sees none.
  ForwardArgs checked = args;
  checked.new_k = checked.new_v = TensorView{};
  ATTN_REQUIRE(has_k == has_v, "args.new_v", has_v ? "set" : "unset", has_k ? "set with new_k" : "unset without new_k");
  begin_run(base_plan, checked, /*check_tensors=*/false);
  const auto& plan = static_cast<const CudaStepPlan&>(base_plan);  // begin_run checked it is cuda_flash's
  check_device_tensor(args.q, "q", {c.dtype}, {md.num_tokens, c.num_heads, c.head_size}, true);
  check_device_tensor(args.out, "out", {c.dtype}, {md.num_tokens, c.num_heads, c.head_size}, false);
  Workspace own(cuda_allocator());
  Workspace& ws = args.workspace ? *args.workspace : own;
  ATTN_REQUIRE(ws.device() == DeviceKind::cuda, "args.workspace.device", std::string(to_string(ws.device())),
               "cuda (Workspace(Registry::instance().allocator(DeviceKind::cuda)))");
  if (ws.bytes() < plan.workspace_bytes()) ws.reserve(plan.workspace_bytes());
  if (md.num_tokens == 0) return {variant_, {}};

  const KVCache& cache = *args.cache;
  const KVCacheSpec& spec = cache.spec();
  const PagedKV kv = cache.view();
  const int32_t* meta = static_cast<const int32_t*>(plan.device_metadata.data());
  if (has_k) {
    const WriteKVParams w = write_params(args.new_k, args.new_v, kv, static_cast<const int64_t*>(plan.slot_mapping.data()),
                                         md.num_tokens, c);
    check_cuda(launch_write_kv(w, elem_kind(spec.dtype, "cache"), nullptr), "cuda_flash write_kv launch");
  }
  const int group = c.num_heads / c.num_kv_heads;
  const std::size_t splits = std::size_t(std::max(plan.decode_splits, 1));
  const std::size_t rows = std::size_t(md.num_tokens) * std::size_t(c.num_heads);

  AttnParams p;
  p.q = args.q.data;
  p.q_stride_t = args.q.strides[0];
  p.q_stride_h = args.q.strides[1];
  p.kv = kv.base;
  p.block_stride = kv.block_stride;
  p.token_stride = kv.token_stride;
  p.head_stride = kv.head_stride;
  p.v_offset = kv.v_offset;
  p.block_size = kv.block_size;
  p.k_scales = kv.k_scales;
  p.v_scales = kv.v_scales;
  p.query_start_loc = meta + plan.off_qsl;
  p.seq_lens = meta + plan.off_seq_lens;
  p.block_table = meta + plan.off_table;
  p.max_blocks_per_seq = md.max_blocks_per_seq;
  p.num_heads = c.num_heads;
  p.num_kv_heads = c.num_kv_heads;
  p.head_size = c.head_size;
  p.group = group;
  p.heads_per_cta = std::min(group, kMaxHeadsPerCta);
  p.scale = params_.effective_scale();
  p.soft_cap = c.logits_soft_cap;
  p.window = c.sliding_window;
  p.causal = md.causal;
  p.o_partial = static_cast<float*>(ws.data());
  p.lse_partial = p.o_partial + splits * rows * std::size_t(c.head_size);
  p.num_tokens = md.num_tokens;

  const ElemKind q_kind = elem_kind(c.dtype, "q");
  const ElemKind kv_kind = elem_kind(spec.dtype, "cache");
  if (plan.decode_count > 0) {
    AttnParams d = p;
    d.seq_list = meta + plan.off_decode;
    d.num_listed = plan.decode_count;
    d.num_splits = plan.decode_splits;
    d.split_tokens = plan.split_tokens;
    check_cuda(launch_decode(d, q_kind, kv_kind, nullptr), "cuda_flash decode launch");
  }
  if (plan.prefill_count > 0) {
    AttnParams f = p;
    f.seq_list = meta + plan.off_prefill;
    f.num_listed = plan.prefill_count;
    check_cuda(launch_prefill(f, q_kind, kv_kind, plan.max_prefill_rows, nullptr), "cuda_flash prefill launch");
  }
  MergeParams m;
  m.o_partial = p.o_partial;
  m.lse_partial = p.lse_partial;
  m.token_seq = meta + plan.off_token_seq;
  m.seq_splits = meta + plan.off_splits;
  m.sinks = c.has_sink ? static_cast<const float*>(sinks_.data()) : nullptr;
  m.v_scales = kv.v_scales;
  m.out = args.out.data;
  m.out_stride_t = args.out.strides[0];
  m.out_stride_h = args.out.strides[1];
  m.num_tokens = md.num_tokens;
  m.num_heads = c.num_heads;
  m.group = group;
  m.head_size = c.head_size;
  check_cuda(launch_merge(m, q_kind, nullptr), "cuda_flash merge launch");
  return {variant_, {}};
}

void CudaFlashAttention::write_kv(const TensorView& k, const TensorView& v, KVCache& cache, const BatchMetadata& md) const {
  if (cache.device() == DeviceKind::cpu) {
    AttentionImpl::write_kv(k, v, cache, md);  // a host cache (to be copied to the GPU) is written on the host
    return;
  }
  const LayerConfig& c = params_.config;
  const KVCacheSpec& spec = cache.spec();
  check_new_kv(k, v, md.num_tokens, c);
  ATTN_REQUIRE(spec.num_kv_heads == c.num_kv_heads && spec.head_size == c.head_size, "cache.spec", spec.to_string(),
               "num_kv_heads=" + std::to_string(c.num_kv_heads) + ", head_size=" + std::to_string(c.head_size));
  ATTN_REQUIRE(int64_t(md.slot_mapping.size()) == md.num_tokens, "md.slot_mapping.size", md.slot_mapping.size(),
               std::to_string(md.num_tokens));
  const int64_t slots = int64_t(spec.num_blocks) * spec.block_size;
  for (int64_t s : md.slot_mapping)
    ATTN_REQUIRE(s < slots, "md.slot_mapping", s, "< num_blocks * block_size = " + std::to_string(slots));
  if (md.num_tokens == 0) return;
  const std::shared_ptr<DeviceAllocator> gpu = cuda_allocator();
  DeviceMemory dslots(gpu, md.slot_mapping.size() * sizeof(int64_t));  // one-off call: its own upload
  gpu->copy(dslots.data(), md.slot_mapping.data(), dslots.bytes(), CopyKind::host_to_device);
  const WriteKVParams w = write_params(k, v, cache.view(), static_cast<const int64_t*>(dslots.data()), md.num_tokens, c);
  check_cuda(launch_write_kv(w, elem_kind(spec.dtype, "cache"), nullptr), "cuda_flash write_kv launch");
  synchronize();  // dslots is freed on return
}

}  // namespace attn::cuda_flash
