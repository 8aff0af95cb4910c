// Linear-attention scan built with AVX-512 flags (chosen at run time).
#define ATTN_MIXER_BUILD avx512
#include "backends/linear/linear_kernel.inc"
