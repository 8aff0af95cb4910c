// CudaFlashAttention: validation at the boundary, the per-step plan (which sequences decode,
// how many KV splits), metadata upload, and the three launches (decode, prefill, merge).
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
  require(t.device == DeviceKind::cuda, std::string(arg) + ".device", "cpu", "a CUDA tensor");
  TensorView shape_only = t;
  shape_only.device = DeviceKind::cpu;
  check_tensor(shape_only, arg, 3, dtypes, extents);
  if (vector_loads) {
    require(reinterpret_cast<uintptr_t>(t.data) % 16 == 0, std::string(arg) + ".data", t.data, "16-byte aligned");
    require(t.strides[0] % 8 == 0 && t.strides[1] % 8 == 0, std::string(arg) + ".strides",
            std::to_string(t.strides[0]) + "," + std::to_string(t.strides[1]), "multiples of 8 elements");
  }
}

}  // namespace

// What one step's metadata turns into: the launch lists and the split-KV choice, plus where
// each array sits in the packed int32 upload.
struct CudaFlashAttention::Plan {
  int num_seqs = 0, num_tokens = 0;
  int decode_count = 0, prefill_count = 0;
  int max_prefill_rows = 0;
  int decode_splits = 1, split_tokens = kDecodeTileTokens;
  std::size_t off_qsl = 0, off_seq_lens = 0, off_table = 0, off_token_seq = 0, off_splits = 0, off_decode = 0,
              off_prefill = 0;
};

CudaFlashAttention::CudaFlashAttention(const LayerParams& params)
    : AttentionImpl("cuda_flash", params), plan_(std::make_unique<Plan>()) {
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
    sinks_.reserve(params_.sinks.size() * sizeof(float));
    check_cuda(cudaMemcpy(sinks_.data(), params_.sinks.data(), params_.sinks.size() * sizeof(float), cudaMemcpyHostToDevice),
               "cudaMemcpy(sinks)");
  }
}

CudaFlashAttention::~CudaFlashAttention() = default;

std::string CudaFlashAttention::variant() const { return variant_; }

void CudaFlashAttention::synchronize() const { check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (kernels)"); }

void CudaFlashAttention::upload_metadata(const BatchMetadata& md) {
  const LayerConfig& c = params_.config;
  Plan p;
  p.num_seqs = md.num_seqs;
  p.num_tokens = md.num_tokens;
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
      p.max_prefill_rows = std::max(p.max_prefill_rows, q * heads_per_cta);
    }
  }
  p.decode_count = int(decode.size());
  p.prefill_count = int(prefill.size());
  // Flash-decoding: enough (split × sequence × head slice) CTAs to fill every SM about four
  // times, each split a whole number of tiles; the split count depends only on the batch, so
  // results are reproducible run to run.
  if (p.decode_count > 0 && max_decode_len > 0) {
    const int base = p.decode_count * c.num_kv_heads * slices;
    const int tiles = (max_decode_len + kDecodeTileTokens - 1) / kDecodeTileTokens;
    const int want = std::clamp((4 * sm_count_ + base - 1) / base, 1, std::min(kMaxSplits, tiles));
    const int per_split_tiles = (tiles + want - 1) / want;
    p.split_tokens = per_split_tiles * kDecodeTileTokens;
    p.decode_splits = (tiles + per_split_tiles - 1) / per_split_tiles;
  }
  std::vector<int32_t> token_seq(std::size_t(md.num_tokens)), seq_splits(std::size_t(md.num_seqs));
  for (int s = 0; s < md.num_seqs; ++s) {
    const int q = md.query_len(s);
    seq_splits[s] = q == 1 ? p.decode_splits : (q > 1 ? 1 : 0);
    for (int i = md.query_start_loc[s]; i < md.query_start_loc[s + 1]; ++i) token_seq[i] = s;
  }

  std::vector<int32_t> packed;
  auto append = [&](const std::vector<int32_t>& v) {
    const std::size_t off = packed.size();
    packed.insert(packed.end(), v.begin(), v.end());
    return off;
  };
  p.off_qsl = append(md.query_start_loc);
  p.off_seq_lens = append(md.seq_lens);
  p.off_table = append(md.block_table);
  p.off_token_seq = append(token_seq);
  p.off_splits = append(seq_splits);
  p.off_decode = append(decode);
  p.off_prefill = append(prefill);
  if (packed != packed_) {  // plan once per step: later layers of the same step reuse the upload
    metadata_.reserve(std::max<std::size_t>(packed.size(), 1) * sizeof(int32_t));
    check_cuda(cudaMemcpy(metadata_.data(), packed.data(), packed.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
               "cudaMemcpy(batch metadata)");
    packed_ = std::move(packed);
  }
  *plan_ = p;
  last_decode_splits_ = p.decode_count > 0 ? p.decode_splits : 0;
}

void CudaFlashAttention::forward(const TensorView& q, const CudaKVCache& cache, const BatchMetadata& md,
                                 const TensorView& out) {
  const LayerConfig& c = params_.config;
  const KVCacheSpec& spec = cache.spec();
  check_device_tensor(q, "q", {c.dtype}, {md.num_tokens, c.num_heads, c.head_size}, true);
  check_device_tensor(out, "out", {c.dtype}, {md.num_tokens, c.num_heads, c.head_size}, false);
  require(spec.num_kv_heads == c.num_kv_heads, "cache.num_kv_heads", spec.num_kv_heads, std::to_string(c.num_kv_heads));
  require(spec.head_size == c.head_size, "cache.head_size", spec.head_size, std::to_string(c.head_size));
  require(spec.dtype == c.dtype || spec.dtype == DType::fp8_e4m3, "cache.dtype", to_string(spec.dtype),
          std::string(to_string(c.dtype)) + " or fp8_e4m3");
  require(md.block_size == spec.block_size, "md.block_size", md.block_size, std::to_string(spec.block_size));
  md.validate(spec.num_blocks, spec.block_size);
  require(md.num_seqs <= 65535, "md.num_seqs", md.num_seqs, "<= 65535 (one grid dimension)");
  if (md.num_tokens == 0) return;

  upload_metadata(md);
  const Plan& plan = *plan_;
  const int group = c.num_heads / c.num_kv_heads;
  const int32_t* meta = metadata_.as<int32_t>();
  const PagedKV kv = cache.view();

  const std::size_t splits = std::size_t(std::max(plan.decode_splits, 1));
  const std::size_t rows = std::size_t(md.num_tokens) * std::size_t(c.num_heads);
  partial_o_.reserve(splits * rows * std::size_t(c.head_size) * sizeof(float));
  partial_lse_.reserve(splits * rows * sizeof(float));

  AttnParams p;
  p.q = q.data;
  p.q_stride_t = q.strides[0];
  p.q_stride_h = q.strides[1];
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
  p.o_partial = partial_o_.as<float>();
  p.lse_partial = partial_lse_.as<float>();
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
  m.sinks = c.has_sink ? sinks_.as<float>() : nullptr;
  m.v_scales = kv.v_scales;
  m.out = out.data;
  m.out_stride_t = out.strides[0];
  m.out_stride_h = out.strides[1];
  m.num_tokens = md.num_tokens;
  m.num_heads = c.num_heads;
  m.group = group;
  m.head_size = c.head_size;
  check_cuda(launch_merge(m, q_kind, nullptr), "cuda_flash merge launch");
}

void CudaFlashAttention::write_kv(const TensorView& k, const TensorView& v, CudaKVCache& cache, const BatchMetadata& md) {
  const LayerConfig& c = params_.config;
  const KVCacheSpec& spec = cache.spec();
  const auto dtypes = {DType::float32, DType::float16, DType::bfloat16};
  check_device_tensor(k, "k", dtypes, {md.num_tokens, c.num_kv_heads, c.head_size}, false);
  check_device_tensor(v, "v", dtypes, {md.num_tokens, c.num_kv_heads, c.head_size}, false);
  require(v.dtype == k.dtype, "v.dtype", to_string(v.dtype), std::string(to_string(k.dtype)) + " (k's dtype)");
  require(spec.num_kv_heads == c.num_kv_heads && spec.head_size == c.head_size, "cache.spec", spec.to_string(),
          "num_kv_heads=" + std::to_string(c.num_kv_heads) + ", head_size=" + std::to_string(c.head_size));
  require(int64_t(md.slot_mapping.size()) == md.num_tokens, "md.slot_mapping.size", md.slot_mapping.size(),
          std::to_string(md.num_tokens));
  const int64_t slots = int64_t(spec.num_blocks) * spec.block_size;
  for (int64_t s : md.slot_mapping) require(s < slots, "md.slot_mapping", s, "< num_blocks * block_size = " + std::to_string(slots));
  if (md.num_tokens == 0) return;
  slots_.reserve(md.slot_mapping.size() * sizeof(int64_t));
  check_cuda(cudaMemcpy(slots_.data(), md.slot_mapping.data(), md.slot_mapping.size() * sizeof(int64_t), cudaMemcpyHostToDevice),
             "cudaMemcpy(slot_mapping)");
  const PagedKV kv = cache.view();
  WriteKVParams w;
  w.k = k.data;
  w.v = v.data;
  w.k_stride_t = k.strides[0];
  w.k_stride_h = k.strides[1];
  w.v_stride_t = v.strides[0];
  w.v_stride_h = v.strides[1];
  w.src_kind = elem_kind(k.dtype, "k");
  w.slot_mapping = slots_.as<int64_t>();
  w.kv = kv.base;
  w.block_stride = kv.block_stride;
  w.token_stride = kv.token_stride;
  w.head_stride = kv.head_stride;
  w.v_offset = kv.v_offset;
  w.block_size = kv.block_size;
  w.k_scales = kv.k_scales;
  w.v_scales = kv.v_scales;
  w.num_tokens = md.num_tokens;
  w.num_kv_heads = c.num_kv_heads;
  w.head_size = c.head_size;
  check_cuda(launch_write_kv(w, elem_kind(spec.dtype, "cache"), nullptr), "cuda_flash write_kv launch");
}

// --- host-cache path ---

namespace {

// A device copy of a contiguous host tensor (or the tensor itself when it is on the device).
TensorView to_device(const TensorView& t, DeviceBuffer& stage, const char* arg, bool copy) {
  if (t.device == DeviceKind::cuda) return t;
  require(t.is_contiguous(), std::string(arg) + ".strides", t.shape_string(), "a contiguous host tensor");
  const std::size_t bytes = std::size_t(t.numel()) * dtype_size(t.dtype);
  stage.reserve(std::max<std::size_t>(bytes, 16));
  if (copy && bytes) check_cuda(cudaMemcpy(stage.data(), t.data, bytes, cudaMemcpyHostToDevice), "cudaMemcpy(stage to device)");
  TensorView d = t;
  d.data = stage.data();
  d.device = DeviceKind::cuda;
  return d;
}

}  // namespace

void CudaFlashAttention::write_kv(const TensorView& k, const TensorView& v, KVCache& cache, const BatchMetadata& md) const {
  if (k.device == DeviceKind::cpu && v.device == DeviceKind::cpu) {
    AttentionImpl::write_kv(k, v, cache, md);  // the host cache is written on the host
    return;
  }
  // Device k / v into a host cache: bring the rows over, then write on the host.
  std::vector<Buffer> host;
  std::vector<TensorView> views;
  for (const TensorView* t : {&k, &v}) {
    if (t->device == DeviceKind::cpu) {
      views.push_back(*t);
      continue;
    }
    require(t->is_contiguous(), "k/v.strides", t->shape_string(), "contiguous device tensors");
    host.emplace_back(t->dtype, std::vector<int64_t>(t->shape.begin(), t->shape.begin() + t->ndim));
    check_cuda(cudaMemcpy(host.back().data(), t->data, host.back().bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy(k/v to host)");
    views.push_back(host.back().view());
  }
  AttentionImpl::write_kv(views[0], views[1], cache, md);
}

RunResult CudaFlashAttention::run(const StepPlan& plan, const ForwardArgs& args) const {
  begin_run(plan, args, /*check_tensors=*/false);  // q / out may live on the device: checked by the device path
  auto* self = const_cast<CudaFlashAttention*>(this);
  const std::lock_guard<std::mutex> lock(self->host_path_);
  self->forward_host(args.q, *args.cache, plan.metadata(), args.out);
  return {variant_, {}};
}

void CudaFlashAttention::forward_host(const TensorView& q, const KVCache& cache, const BatchMetadata& md, const TensorView& out) {
  const KVCacheSpec& a = cache.spec();
  const bool same = mirror_ && [&] {
    const KVCacheSpec& b = mirror_->spec();
    return a.num_blocks == b.num_blocks && a.block_size == b.block_size && a.num_kv_heads == b.num_kv_heads &&
           a.head_size == b.head_size && a.v_width() == b.v_width() && a.dtype == b.dtype && a.layout == b.layout &&
           a.per_head_scales == b.per_head_scales;
  }();
  if (!same)
    mirror_ = std::make_unique<CudaKVCache>(cache.spec());
  mirror_->upload(cache);
  const TensorView dq = to_device(q, stage_q_, "q", true);
  const TensorView dout = to_device(out, stage_out_, "out", false);
  forward(dq, *mirror_, md, dout);
  synchronize();
  if (out.device == DeviceKind::cpu) {
    const std::size_t bytes = std::size_t(out.numel()) * dtype_size(out.dtype);
    if (bytes) check_cuda(cudaMemcpy(out.data, dout.data, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy(out to host)");
  }
}

}  // namespace attn::cuda_flash
