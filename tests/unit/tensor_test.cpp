// check_tensor (tensor.hpp): one test per bad tensor argument; each error names the argument.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

#include "attn/tensor.hpp"
#include "support/expect_error.hpp"

namespace {

using namespace attn;
using attn::test::throws_error;

struct TensorChecks : ::testing::Test {
  std::vector<float> storage = std::vector<float>(2 * 3 * 4);
  TensorView t = TensorView::contiguous(storage.data(), DType::float32, {2, 3, 4});
  void check() const { check_tensor(t, "q", 3, {DType::float32, DType::bfloat16}, {2, 3, 4}); }
};

TEST_F(TensorChecks, AcceptsAWellFormedTensor) {
  EXPECT_NO_THROW(check());
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.shape_string(), "[2, 3, 4]");
  EXPECT_EQ(t.strides[0], 12);
}

TEST_F(TensorChecks, NullData) {
  t.data = nullptr;
  EXPECT_TRUE(throws_error([&] { check(); }, {"q.data", "null", "non-null"}));
}

TEST_F(TensorChecks, NullDataIsFineWhenEmpty) {
  t = TensorView::contiguous(nullptr, DType::float32, {0, 3, 4});
  EXPECT_NO_THROW(check_tensor(t, "q", 3, {DType::float32}, {-1, 3, 4}));
}

TEST_F(TensorChecks, CudaTensorOnCpuBackend) {
  t.device = DeviceKind::cuda;
  EXPECT_TRUE(throws_error([&] { check(); }, {"q.device", "cuda", "a CPU tensor"}));
}

TEST_F(TensorChecks, WrongRank) {
  t = TensorView::contiguous(storage.data(), DType::float32, {6, 4});
  EXPECT_TRUE(throws_error([&] { check(); }, {"q.ndim=2", "3 dimensions"}));
}

TEST_F(TensorChecks, WrongDType) {
  t.dtype = DType::float16;
  EXPECT_TRUE(throws_error([&] { check(); }, {"q.dtype=float16", "one of float32, bfloat16"}));
}

TEST_F(TensorChecks, IndexDTypeForADataTensor) {
  t.dtype = DType::int32;
  EXPECT_TRUE(throws_error([&] { check(); }, {"q.dtype=int32"}));
}

TEST_F(TensorChecks, WrongExtent) {
  t = TensorView::contiguous(storage.data(), DType::float32, {2, 4, 3});
  EXPECT_TRUE(throws_error([&] { check(); }, {"q.shape=[2, 4, 3]", "dimension 1 to be 3"}));
}

TEST_F(TensorChecks, AnyExtentAcceptsEverySize) {
  t = TensorView::contiguous(storage.data(), DType::float32, {4, 3, 2});
  EXPECT_NO_THROW(check_tensor(t, "k", 3, {DType::float32}, {-1, -1, 2}));
}

TEST_F(TensorChecks, NegativeExtent) {
  t.shape[0] = -2;
  EXPECT_TRUE(throws_error([&] { check_tensor(t, "q", 3, {DType::float32}, {-1, 3, 4}); }, {"q.shape", "non-negative extents"}));
}

TEST_F(TensorChecks, NonContiguousLastDimension) {
  t.strides[2] = 2;
  EXPECT_TRUE(throws_error([&] { check(); }, {"q.strides=2", "stride 1"}));
}

TEST_F(TensorChecks, NonContiguousLastDimensionAllowedWhenNotRequired) {
  t.strides[2] = 2;
  EXPECT_NO_THROW(check_tensor(t, "q", 3, {DType::float32}, {2, 3, 4}, /*inner_contiguous=*/false));
}

TEST_F(TensorChecks, NegativeStride) {
  t.strides[0] = -12;
  EXPECT_TRUE(throws_error([&] { check(); }, {"q.strides=-12", "non-negative strides"}));
}

TEST(Tensor, NonContiguousViewIsDetected) {
  std::vector<float> s(16);
  TensorView t = TensorView::contiguous(s.data(), DType::float32, {4, 4});
  t.strides[0] = 8;  // every other row of an [8, 4] tensor
  EXPECT_FALSE(t.is_contiguous());
}

TEST(Tensor, TooManyDimensions) {
  EXPECT_TRUE(throws_error([] { TensorView::contiguous(nullptr, DType::float32, std::vector<int64_t>(7, 1)); },
                           {"ndim=7", "at most 6"}));
}

TEST(Buffer, ZeroedAlignedAndMovable) {
  Buffer b(DType::bfloat16, {3, 5});
  EXPECT_EQ(b.bytes(), 30u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(load_as_float(b.data(), b.dtype(), i), 0.0f);
  Buffer moved = std::move(b);
  EXPECT_EQ(moved.bytes(), 30u);
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(moved.view().shape_string(), "[3, 5]");
}

TEST(Buffer, NegativeExtent) {
  EXPECT_TRUE(throws_error([] { Buffer b(DType::float32, {2, -1}); }, {"shape=[2, -1]", "non-negative"}));
}

TEST(Buffer, BytesBeyond64BitsAreRefusedNotWrapped) {
  // 2^30 * 2^28 * 2^8 * 4 bytes wraps to 0 in 64-bit arithmetic: a 0-byte buffer for a huge shape.
  EXPECT_TRUE(throws_error([] { Buffer b(DType::float32, {int64_t(1) << 30, int64_t(1) << 28, int64_t(1) << 8}); },
                           {"shape [1073741824, 268435456, 256] bytes=1073741824 * 268435456 * 256 * 4 (beyond 64 bits)"}));
}

long resident_pages() {
  long size = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &size, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident;
}

TEST(Buffer, LargeBuffersAreZeroWithoutTouchingTheirPages) {
  const long before = resident_pages();
  Buffer b(DType::float32, {64, 1 << 20});  // 256 MiB
  const long after = resident_pages();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  EXPECT_LT((after - before) * sysconf(_SC_PAGESIZE), 32l << 20) << "the buffer's pages were touched up front";
  const int64_t n = b.view().numel();
  for (int64_t i : {int64_t(0), n / 2, n - 1}) EXPECT_EQ(load_as_float(b.data(), b.dtype(), i), 0.0f);
  Buffer moved = std::move(b);  // the mapping moves with it and is unmapped once
  EXPECT_EQ(moved.bytes(), std::size_t(256) << 20);
}

TEST(Tensor, LoadAndStoreConvertEveryDType) {
  for (DType d : all_dtypes()) {
    Buffer b(d, {4});
    store_from_float(b.data(), d, 2, 3.0f);
    EXPECT_EQ(load_as_float(b.data(), d, 2), 3.0f) << to_string(d);
    EXPECT_EQ(load_as_float(b.data(), d, 1), 0.0f) << to_string(d);
  }
  Buffer i8(DType::int8, {2});
  store_from_float(i8.data(), DType::int8, 0, 1000.0f);
  store_from_float(i8.data(), DType::int8, 1, -2.6f);
  EXPECT_EQ(load_as_float(i8.data(), DType::int8, 0), 127.0f) << "int8 saturates";
  EXPECT_EQ(load_as_float(i8.data(), DType::int8, 1), -3.0f) << "int8 rounds to nearest";
}

}  // namespace

namespace attn {
namespace {
// Found by the constructors fuzz harness: no bytes (a zero dimension), inner strides past 64 bits.
TEST(Buffer, ZeroDimensionWithOverflowingStridesIsAnError) {
  try {
    Buffer b(DType::float32, {0, int64_t(1) << 34, int64_t(1) << 44});
    (void)b.view();
    FAIL() << "expected attn::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shape="), std::string::npos) << e.what();
  }
}
}  // namespace
}  // namespace attn
