// Entry point of the GPU suite. Without a usable device the run exits with 77, which ctest
// reports as "Skipped" (SKIP_RETURN_CODE in ../CMakeLists.txt) instead of "Passed" with every
// test skipped; each fixture still GTEST_SKIPs with the reason when run by hand.
#include <gtest/gtest.h>

#include <cstdio>

#include "attn/attn.hpp"

namespace {
constexpr int kSkipReturnCode = 77;  // must match SKIP_RETURN_CODE of the cuda_flash_gpu test
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (GTEST_FLAG_GET(list_tests)) return RUN_ALL_TESTS();
  std::string why = "cuda_flash is not registered";
  auto desc = attn::Registry::instance().find("cuda_flash");
  if (desc && attn::Registry::instance().ensure_module(*desc, why)) return RUN_ALL_TESTS();
  std::printf("cuda_flash GPU suite SKIPPED, nothing ran: no usable GPU: %s\n", why.c_str());
  return kSkipReturnCode;
}
