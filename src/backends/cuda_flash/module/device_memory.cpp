// DeviceBuffer and CudaKVCache: device memory through plain cudaMalloc, every call checked.
#include "backends/cuda_flash/cuda_flash.hpp"
#include "backends/cuda_flash/module/cuda_check.hpp"

namespace attn::cuda_flash {

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (data_) cudaFree(data_);
    data_ = o.data_;
    bytes_ = o.bytes_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);  // no throwing from a destructor; a failing free leaks at worst
}

void DeviceBuffer::reserve(std::size_t bytes) {
  if (bytes <= bytes_) return;
  if (data_) check_cuda(cudaFree(data_), "cudaFree");
  data_ = nullptr;
  bytes_ = 0;
  check_cuda(cudaMalloc(&data_, bytes), ("cudaMalloc(" + std::to_string(bytes) + " bytes)").c_str());
  bytes_ = bytes;
}

namespace {

// KVCache::k_scales() always has num_kv_heads entries; set_scales wants one for a per-tensor cache.
std::vector<float> as_set_scales_arg(const std::vector<float>& scales, bool per_head) {
  return per_head || scales.empty() ? scales : std::vector<float>{scales[0]};
}

std::size_t spec_bytes(const KVCacheSpec& spec) {
  std::size_t n = dtype_size(spec.dtype);
  for (int64_t e : spec.shape()) n *= std::size_t(e);
  return n;
}

}  // namespace

CudaKVCache::CudaKVCache(const KVCacheSpec& spec) : spec_(spec) {
  require(spec.num_blocks > 0, "num_blocks", spec.num_blocks, "> 0");
  require(spec.block_size > 0, "block_size", spec.block_size, "> 0");
  require(spec.num_kv_heads > 0, "num_kv_heads", spec.num_kv_heads, "> 0");
  require(spec.head_size > 0, "head_size", spec.head_size, "> 0");
  require(spec.layout == KVLayout::NHD || spec.layout == KVLayout::HND, "layout", to_string(spec.layout),
          "NHD or HND (cuda_flash keeps no MLA cache)");
  require(spec.v_width() == spec.head_size, "head_size_v", spec.head_size_v, "0 or head_size");
  require(spec.dtype == DType::float16 || spec.dtype == DType::bfloat16 || spec.dtype == DType::fp8_e4m3, "cache dtype",
          to_string(spec.dtype), "float16, bfloat16 or fp8_e4m3");
  bytes_ = spec_bytes(spec);
  storage_.reserve(bytes_);
  scales_.reserve(sizeof(float) * 2 * std::size_t(spec.num_kv_heads));
  set_scales({1.0f}, {1.0f});
}

PagedKV CudaKVCache::view() const {
  PagedKV v;
  v.base = storage_.data();
  v.dtype = spec_.dtype;
  v.num_blocks = spec_.num_blocks;
  v.block_size = spec_.block_size;
  v.num_kv_heads = spec_.num_kv_heads;
  v.head_size = v.head_size_v = spec_.head_size;
  const int64_t w = spec_.head_size, bs = spec_.block_size, h = spec_.num_kv_heads;
  if (spec_.layout == KVLayout::NHD) {
    v.head_stride = w; v.token_stride = h * w;
  } else {
    v.token_stride = w; v.head_stride = bs * w;
  }
  v.v_offset = bs * h * w;
  v.block_stride = 2 * bs * h * w;
  v.k_scales = scales_.as<float>();
  v.v_scales = scales_.as<float>() + spec_.num_kv_heads;
  return v;
}

void CudaKVCache::set_scales(const std::vector<float>& k_scales, const std::vector<float>& v_scales) {
  // The host cache's rules (per tensor or per head, finite, > 0) on a one-token stand-in.
  KVCacheSpec tiny = spec_;
  tiny.num_blocks = 1;
  tiny.block_size = 1;
  KVCache rules(tiny);
  rules.set_scales(k_scales, v_scales);
  k_scales_ = rules.k_scales();
  v_scales_ = rules.v_scales();
  std::vector<float> both = k_scales_;
  both.insert(both.end(), v_scales_.begin(), v_scales_.end());
  check_cuda(cudaMemcpy(scales_.data(), both.data(), both.size() * sizeof(float), cudaMemcpyHostToDevice),
             "cudaMemcpy(kv scales)");
}

void CudaKVCache::upload(const KVCache& host) {
  const KVCacheSpec& h = host.spec();
  require(h.num_blocks == spec_.num_blocks && h.block_size == spec_.block_size && h.num_kv_heads == spec_.num_kv_heads &&
              h.head_size == spec_.head_size && h.dtype == spec_.dtype && h.layout == spec_.layout &&
              host.bytes() == bytes_,
          "cache.spec", h.to_string(), "the device cache's spec " + spec_.to_string());
  check_cuda(cudaMemcpy(storage_.data(), host.data(), bytes_, cudaMemcpyHostToDevice), "cudaMemcpy(cache upload)");
  set_scales(as_set_scales_arg(host.k_scales(), spec_.per_head_scales),
             as_set_scales_arg(host.v_scales(), spec_.per_head_scales));
}

void CudaKVCache::download(KVCache& host) const {
  require(host.bytes() == bytes_ && host.spec().dtype == spec_.dtype && host.spec().layout == spec_.layout, "cache.spec",
          host.spec().to_string(), "the device cache's spec " + spec_.to_string());
  check_cuda(cudaMemcpy(host.data(), storage_.data(), bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy(cache download)");
  host.set_scales(as_set_scales_arg(k_scales_, host.spec().per_head_scales),
                  as_set_scales_arg(v_scales_, host.spec().per_head_scales));
}

void CudaKVCache::fill_bytes(int byte) {
  check_cuda(cudaMemset(storage_.data(), byte, bytes_), "cudaMemset(cache)");
}

}  // namespace attn::cuda_flash
