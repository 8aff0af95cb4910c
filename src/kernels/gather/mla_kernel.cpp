// Portable build of the MLA attend kernel (no ISA flags): plain loops, scalar conversions.
#include <algorithm>
#include <cmath>
#include <vector>

#include "attn/numeric.hpp"
#include "kernels/gather/mla_kernel.hpp"

namespace attn::mla {
namespace portable {

void convert_row(DType dtype, const uint8_t* src, float* dst, int n, float scale) {
  for (int i = 0; i < n; ++i) dst[i] = load_as_float(src, dtype, i) * scale;
}

void dot4(const float* q, const float* k0, const float* k1, const float* k2, const float* k3, int n, float* out) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (int d = 0; d < n; ++d) {
    s0 += q[d] * k0[d];
    s1 += q[d] * k1[d];
    s2 += q[d] * k2[d];
    s3 += q[d] * k3[d];
  }
  out[0] = s0, out[1] = s1, out[2] = s2, out[3] = s3;
}

void axpy4(float* acc, const float* p, const float* k0, const float* k1, const float* k2, const float* k3, int n) {
  for (int d = 0; d < n; ++d) acc[d] += p[0] * k0[d] + p[1] * k1[d] + p[2] * k2[d] + p[3] * k3[d];
}

#include "kernels/gather/mla_kernel.inl"

}  // namespace portable

AttendFn attend_portable() { return &portable::attend_impl; }

}  // namespace attn::mla
