// Linear-attention scan, portable build.
#define ATTN_MIXER_ISA generic
#include "backends/linear/linear_kernel.inc"
