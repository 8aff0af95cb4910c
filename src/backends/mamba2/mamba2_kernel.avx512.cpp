// Mamba-2 SSD scan built with AVX-512 flags (chosen at run time).
#define ATTN_MIXER_BUILD avx512
#include "backends/mamba2/mamba2_kernel.inc"
