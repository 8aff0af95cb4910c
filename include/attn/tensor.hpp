#pragma once
/// Non-owning tensor views (DLPack-shaped: pointer, dtype, shape, strides in elements, device),
/// so NumPy / PyTorch arrays cross the API without copies; and a small owning buffer.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "attn/types.hpp"

namespace attn {

enum class DeviceKind : uint8_t { cpu, cuda };
inline constexpr DeviceKind kLastDeviceKind = DeviceKind::cuda;  // the name table is checked against it
std::string_view to_string(DeviceKind d);  // "cpu" / "cuda"

struct TensorView {
  static constexpr int kMaxDims = 6;
  void* data = nullptr;
  DType dtype = DType::float32;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> strides{};  // in elements
  DeviceKind device = DeviceKind::cpu;

  /// Contiguous (row-major) view.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape);
  static TensorView contiguous(void* data, DType dtype, const std::vector<int64_t>& shape);

  int64_t numel() const;
  int64_t size(int d) const { return shape[d]; }
  bool is_contiguous() const;
  std::string shape_string() const;  // "[2, 8, 128]"
  template <typename T> T* ptr() const { return static_cast<T*>(data); }
};

/// Validates a tensor argument at the API boundary: rank, dtype set, and (optionally) exact
/// extents (-1 = any) and contiguity of the last dimension. Throws attn::Error naming `arg`.
void check_tensor(const TensorView& t, const char* arg, int ndim, std::initializer_list<DType> dtypes,
                  std::initializer_list<int64_t> extents = {}, bool inner_contiguous = true);

/// Bytes of a contiguous tensor of `shape`; throws attn::Error naming `name` when an extent is
/// negative or the product does not fit in 64 bits (a wrapped size would under-allocate).
int64_t checked_nbytes(const std::string& name, DType dtype, const std::vector<int64_t>& shape);

/// Owning, zeroed, contiguous buffer, 64-byte aligned (from 1 MiB up: page-aligned, its pages
/// zeroed by the kernel on first touch); `view()` hands out a TensorView.
class Buffer {
 public:
  Buffer() = default;
  Buffer(DType dtype, std::vector<int64_t> shape);
  Buffer(Buffer&&) noexcept;
  Buffer& operator=(Buffer&&) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  TensorView view() const;
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  DType dtype_ = DType::float32;
  std::vector<int64_t> shape_;
};

/// Reads element `i` (flat index over a contiguous tensor) as float, whatever the dtype.
float load_as_float(const void* data, DType dtype, int64_t i);
/// Stores `v` into element `i`, converting (fp8: saturating, after dividing by nothing).
void store_from_float(void* data, DType dtype, int64_t i, float v);

}  // namespace attn
