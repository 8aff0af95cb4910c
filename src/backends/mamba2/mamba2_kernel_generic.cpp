// Mamba-2 SSD scan, portable build.
#define ATTN_MIXER_BUILD generic
#include "backends/mamba2/mamba2_kernel.inc"
