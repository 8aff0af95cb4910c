// Mamba-1 scan, portable build.
#define ATTN_MIXER_BUILD generic
#include "backends/mamba1/mamba1_kernel.inc"
