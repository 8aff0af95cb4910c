// Causal depthwise conv1d built with AVX-512 flags (chosen at run time).
#define ATTN_MIXER_BUILD avx512
#include "mamba/conv_kernel.inc"
