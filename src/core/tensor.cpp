#include "attn/tensor.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include <sys/mman.h>

#include "attn/checked.hpp"
#include "attn/error.hpp"
#include "attn/numeric.hpp"
#include "core/names.hpp"

namespace attn {

namespace {

constexpr detail::NameArray<DeviceKind, 2> kDeviceKindNames = {{{DeviceKind::cpu, "cpu"}, {DeviceKind::cuda, "cuda"}}};
static_assert(detail::covers_enum(kDeviceKindNames, kLastDeviceKind));

// Large buffers (KV caches) come from the kernel as zero pages mapped on first touch, so a cache
// sized for the worst case costs only what is written; small ones are cheaper from the heap.
constexpr std::size_t kMapThreshold = std::size_t(1) << 20;

std::size_t allocation_size(std::size_t bytes) {
  const std::size_t rounded = (bytes + 63) / 64 * 64;
  return rounded ? rounded : 64;
}

void* allocate_zeroed(std::size_t bytes) {
  const std::size_t size = allocation_size(bytes);
  if (size >= kMapThreshold) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw Error("Buffer bytes=" + std::to_string(bytes) + " invalid: expected an allocation this machine can map");
    // Huge pages where the kernel offers them on request (THP "madvise"): a paged KV read
    // touches a new 4 KiB page every few rows, and TLB misses then cost a third of DRAM speed.
    ::madvise(p, size, MADV_HUGEPAGE);
    return p;
  }
  void* p = std::aligned_alloc(64, size);
  if (!p) throw Error("Buffer bytes=" + std::to_string(bytes) + " invalid: expected an allocation this machine can make");
  std::memset(p, 0, size);
  return p;
}

void release(void* p, std::size_t bytes) {
  if (!p) return;
  const std::size_t size = allocation_size(bytes);
  if (size >= kMapThreshold) ::munmap(p, size);
  else std::free(p);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (std::size_t d = 0; d < shape.size(); ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
  return s + "]";
}

}  // namespace

std::string_view to_string(DeviceKind d) { return detail::name_of(kDeviceKindNames, d); }

TensorView TensorView::contiguous(void* data, DType dtype, const std::vector<int64_t>& shape) {
  TensorView t;
  require(int(shape.size()) <= kMaxDims, "ndim", shape.size(), "at most 6 dimensions");
  t.data = data;
  t.dtype = dtype;
  t.ndim = int(shape.size());
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.shape[d] = shape[d];
    t.strides[d] = stride;
    // A shape with a zero dimension holds no bytes, yet its inner strides must still fit.
    if (d > 0 && __builtin_mul_overflow(stride, shape[d], &stride))
      throw Error("shape=" + shape_text(shape) + " invalid: expected strides that fit in 64 bits");
  }
  return t;
}

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape) {
  return contiguous(data, dtype, std::vector<int64_t>(shape));
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != stride) return false;
    stride *= shape[d];
  }
  return true;
}

std::string TensorView::shape_string() const {
  return shape_text(std::vector<int64_t>(shape.begin(), shape.begin() + ndim));
}

void check_tensor(const TensorView& t, const char* arg, int ndim, std::initializer_list<DType> dtypes,
                  std::initializer_list<int64_t> extents, bool inner_contiguous) {
  // Runs once per layer per step: no string is built unless a check fails.
  const auto a = [arg](const char* field) { return std::string(arg) + field; };
  ATTN_REQUIRE(t.data != nullptr || t.numel() == 0, a(".data"), "null", "a non-null pointer");
  ATTN_REQUIRE(t.device == DeviceKind::cpu, a(".device"), "cuda", "a CPU tensor");
  ATTN_REQUIRE(t.ndim == ndim, a(".ndim"), t.ndim, std::to_string(ndim) + " dimensions");
  bool dtype_ok = false;
  for (DType d : dtypes) dtype_ok |= (d == t.dtype);
  if (!dtype_ok) [[unlikely]] {
    std::vector<std::string> names;
    for (DType d : dtypes) names.emplace_back(to_string(d));
    fail_check(a(".dtype"), to_string(t.dtype), "one of " + join(names));
  }
  int d = 0;
  for (int64_t e : extents) {
    if (e >= 0 && t.shape[d] != e) [[unlikely]]
      throw Error(a(".shape=") + t.shape_string() + " invalid: expected dimension " + std::to_string(d) + " to be " +
                  std::to_string(e));
    ++d;
  }
  for (int i = 0; i < t.ndim; ++i)
    ATTN_REQUIRE(t.shape[i] >= 0, a(".shape"), t.shape_string(), "non-negative extents");
  if (inner_contiguous && t.ndim > 0 && t.shape[t.ndim - 1] > 1)
    ATTN_REQUIRE(t.strides[t.ndim - 1] == 1, a(".strides"), t.strides[t.ndim - 1], "a contiguous last dimension (stride 1)");
  for (int i = 0; i < t.ndim; ++i)
    ATTN_REQUIRE(t.strides[i] >= 0, a(".strides"), t.strides[i], "non-negative strides");
}

int64_t checked_nbytes(const std::string& name, DType dtype, const std::vector<int64_t>& shape) {
  for (int64_t e : shape) require(e >= 0, name, shape_text(shape), "non-negative extents");
  std::vector<int64_t> factors(shape);
  factors.push_back(int64_t(dtype_size(dtype)));
  return checked_product(name + " " + shape_text(shape) + " bytes", factors, kInt64Max,
                         "the bytes of one tensor must fit in 64 bits");
}

Buffer::Buffer(DType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
  require(shape_.size() <= std::size_t(TensorView::kMaxDims), "shape.size()", shape_.size(), "at most 6 dimensions");
  bytes_ = std::size_t(checked_nbytes("shape", dtype_, shape_));
  data_ = allocate_zeroed(bytes_);
}

Buffer::Buffer(Buffer&& o) noexcept { *this = std::move(o); }
Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release(data_, bytes_);
    data_ = o.data_;
    bytes_ = o.bytes_;
    dtype_ = o.dtype_;
    shape_ = std::move(o.shape_);
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}
Buffer::~Buffer() { release(data_, bytes_); }

TensorView Buffer::view() const { return TensorView::contiguous(data_, dtype_, shape_); }

float load_as_float(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::float32: return static_cast<const float*>(data)[i];
    case DType::float16: return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::bfloat16: return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::fp8_e4m3: return fp8_e4m3_to_f32(static_cast<const uint8_t*>(data)[i]);
    case DType::fp8_e5m2: return fp8_e5m2_to_f32(static_cast<const uint8_t*>(data)[i]);
    case DType::int8: return float(static_cast<const int8_t*>(data)[i]);
    case DType::int32: return float(static_cast<const int32_t*>(data)[i]);
    case DType::int64: return float(static_cast<const int64_t*>(data)[i]);
  }
  return 0.0f;
}

void store_from_float(void* data, DType dtype, int64_t i, float v) {
  switch (dtype) {
    case DType::float32: static_cast<float*>(data)[i] = v; break;
    case DType::float16: static_cast<uint16_t*>(data)[i] = f32_to_f16(v); break;
    case DType::bfloat16: static_cast<uint16_t*>(data)[i] = f32_to_bf16(v); break;
    case DType::fp8_e4m3: static_cast<uint8_t*>(data)[i] = f32_to_fp8_e4m3(v); break;
    case DType::fp8_e5m2: static_cast<uint8_t*>(data)[i] = f32_to_fp8_e5m2(v); break;
    case DType::int8: static_cast<int8_t*>(data)[i] = int8_t(std::max(-128.0f, std::min(127.0f, std::nearbyint(v)))); break;
    case DType::int32: static_cast<int32_t*>(data)[i] = int32_t(v); break;
    case DType::int64: static_cast<int64_t*>(data)[i] = int64_t(v); break;
  }
}

}  // namespace attn
