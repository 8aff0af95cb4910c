// Device-tagged caches without a GPU: a cache allocated through a (host-backed) allocator that
// reports another device keeps its bytes and scales there, copies to and from host caches, is
// refused by KVCache::write and by every CPU backend's run, and asking the registry for cuda
// memory on a machine without a GPU is an error carrying the module's reason.
#include <gtest/gtest.h>

#include <cstring>

#include "attn/attn.hpp"

namespace attn {
namespace {

// Host memory reporting DeviceKind::cuda, counting what goes through it.
class FakeDevice final : public DeviceAllocator {
 public:
  DeviceKind device() const override { return DeviceKind::cuda; }
  void* allocate(std::size_t bytes) override { ++allocations; return host_allocator()->allocate(bytes); }
  void deallocate(void* p) noexcept override { host_allocator()->deallocate(p); }
  void copy(void* dst, const void* src, std::size_t bytes, CopyKind kind) override {
    ++copies[int(kind)];
    std::memmove(dst, src, bytes);
  }
  void memset(void* dst, int byte, std::size_t bytes) override { std::memset(dst, byte, bytes); }
  int allocations = 0;
  int copies[3] = {0, 0, 0};
};

KVCacheSpec small_spec() {
  return {.num_blocks = 3, .block_size = 16, .num_kv_heads = 2, .head_size = 64, .dtype = DType::bfloat16,
          .per_head_scales = true};
}

TEST(KVCacheDevice, DeviceCacheViewsCopiesAndRefusesHostWrites) {
  auto dev = std::make_shared<FakeDevice>();
  const KVCacheSpec spec = small_spec();
  KVCache host(spec), on_dev(spec, dev);
  EXPECT_EQ(host.device(), DeviceKind::cpu);
  EXPECT_EQ(on_dev.device(), DeviceKind::cuda);
  EXPECT_EQ(dev->allocations, 2);  // bytes and scales
  EXPECT_EQ(on_dev.bytes(), host.bytes());
  host.fill(0.25f);
  host.set_scales({0.5f, 2.0f}, {1.0f, 4.0f});
  on_dev.copy_from(host);  // upload
  EXPECT_EQ(dev->copies[int(CopyKind::host_to_device)], 3);  // initial scales, bytes, scales
  const PagedKV v = on_dev.view();
  EXPECT_EQ(v.base, on_dev.data());
  EXPECT_EQ(v.k_scales[1], 2.0f);  // the device copy of the scales
  EXPECT_EQ(v.v_scales[1], 4.0f);
  KVCache back(spec);
  back.copy_from(on_dev);  // download
  EXPECT_EQ(std::memcmp(back.data(), host.data(), host.bytes()), 0);
  EXPECT_EQ(back.k_scales(), host.k_scales());
  // Host-side writes need a host cache.
  const BatchMetadata md = BatchMetadata::build({{0, 1, {0}}}, 16, 3);
  Buffer k(DType::float32, {1, 2, 64}), val(DType::float32, {1, 2, 64});
  try {
    on_dev.write(k.view(), val.view(), md);
    ADD_FAILURE() << "KVCache::write wrote a device cache";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cache.device"), std::string::npos) << e.what();
  }
  KVCacheSpec other = spec;
  other.num_blocks = 4;
  EXPECT_THROW(on_dev.copy_from(KVCache(other)), Error);
}

TEST(KVCacheDevice, CpuBackendsRefuseADeviceCache) {
  LayerParams p;
  p.config.num_heads = 4;
  p.config.num_kv_heads = 2;
  p.config.head_size = 64;
  p.config.dtype = DType::float32;
  auto desc = Registry::instance().find("reference");
  ASSERT_TRUE(desc);
  EXPECT_EQ(desc->device, DeviceKind::cpu);
  EXPECT_EQ(Registry::instance().find("cuda_flash")->device, DeviceKind::cuda);
  auto impl = Registry::instance().create("reference", p);
  KVCache cache(desc->cache_spec(p.config, 3, 16), std::make_shared<FakeDevice>());
  const BatchMetadata md = BatchMetadata::build({{0, 2, {0}}}, 16, 3);
  Buffer q(DType::float32, {2, 4, 64}), out(DType::float32, {2, 4, 64});
  try {
    impl->forward(q.view(), cache, md, out.view());
    ADD_FAILURE() << "a CPU backend ran over a device cache";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cache.device=cuda"), std::string::npos) << e.what();
  }
}

TEST(KVCacheDevice, DeviceWorkspaceGrowsThroughItsAllocator) {
  auto dev = std::make_shared<FakeDevice>();
  Workspace ws(dev);
  EXPECT_EQ(ws.device(), DeviceKind::cuda);
  ws.reserve(100);
  EXPECT_GE(ws.bytes(), 100u);
  ws.reserve(50);  // never shrinks, no new allocation
  EXPECT_EQ(dev->allocations, 1);
  EXPECT_EQ(Workspace().device(), DeviceKind::cpu);
}

TEST(KVCacheDevice, CudaMemoryWithoutAGpuIsAnErrorWithTheReason) {
  Platform gpu;
  std::string no_gpu;
  if (detect_cuda(gpu, no_gpu)) GTEST_SKIP() << "a GPU is present: attn_cuda_tests covers cuda memory";
  EXPECT_EQ(Registry::instance().allocator(DeviceKind::cpu)->device(), DeviceKind::cpu);
  try {
    Registry::instance().allocator(DeviceKind::cuda);
    ADD_FAILURE() << "cuda memory without a GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("device=cuda"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("attn_cuda"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attn
