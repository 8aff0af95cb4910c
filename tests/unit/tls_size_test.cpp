// libattn's thread-local storage stays small. glibc gives every thread of a program linked
// against a library that library's whole TLS block, carved from the thread's stack: when each
// instantiation of a kernel template held its own scratch, libattn carried about 6 MiB of it, so
// every thread of every host program (an engine's thread pools included) lost most of its 8 MiB
// default stack, and one more kernel build overflowed OpenMP's worker stacks outright.
#include <gtest/gtest.h>
#include <link.h>

#include <cstring>
#include <string>

#include "attn/tune.hpp"

namespace attn {
namespace {

struct Found {
  std::string name;
  uint64_t tls_bytes = 0;
};

int find_libattn(dl_phdr_info* info, size_t, void* data) {
  auto* f = static_cast<Found*>(data);
  if (!info->dlpi_name || !std::strstr(info->dlpi_name, "libattn.so")) return 0;
  f->name = info->dlpi_name;
  for (int i = 0; i < info->dlpi_phnum; ++i)
    if (info->dlpi_phdr[i].p_type == PT_TLS) f->tls_bytes = info->dlpi_phdr[i].p_memsz;
  return 1;
}

TEST(LibraryTls, ThreadLocalStorageIsAFractionOfAThreadStack) {
  (void)attn::version();  // libattn is loaded
  Found f;
  dl_iterate_phdr(find_libattn, &f);
  ASSERT_FALSE(f.name.empty()) << "libattn.so is not among the loaded objects";
  // The kernels' per-thread scratch: one per decode / prefill build, not one per instantiation.
  EXPECT_LT(f.tls_bytes, 1u << 20) << f.name << " has " << f.tls_bytes << " bytes of thread-local storage";
}

}  // namespace
}  // namespace attn
