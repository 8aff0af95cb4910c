// Mamba-1 scan built with AVX-512 flags (chosen at run time).
#define ATTN_MIXER_BUILD avx512
#include "backends/mamba1/mamba1_kernel.inc"
