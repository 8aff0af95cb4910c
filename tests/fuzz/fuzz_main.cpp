// libFuzzer entry point; ATTN_FUZZ_TARGET names the harness this executable runs
// (tests/fuzz/CMakeLists.txt builds one executable per harness).
#include <cstdlib>

#include "fuzz/harnesses.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // One log line per distinct selector decision would flood the fuzzer's output.
  setenv("ATTN_LOG", "error", 0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return attn::fuzz::ATTN_FUZZ_TARGET(data, size); }
