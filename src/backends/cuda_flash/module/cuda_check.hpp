#pragma once
// Every CUDA runtime call goes through check_cuda: failures become attn::Error naming the call
// and cudaGetErrorString.
#include <cuda_runtime.h>

#include <string>

#include "attn/error.hpp"

namespace attn::cuda_flash {

inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}
inline void check_cuda(int e, const char* what) { check_cuda(static_cast<cudaError_t>(e), what); }

}  // namespace attn::cuda_flash
