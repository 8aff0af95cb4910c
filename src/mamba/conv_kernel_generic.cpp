// Causal depthwise conv1d, portable build.
#define ATTN_MIXER_BUILD generic
#include "mamba/conv_kernel.inc"
