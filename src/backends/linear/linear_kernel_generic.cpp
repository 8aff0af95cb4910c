// Linear-attention scan, portable build.
#define ATTN_MIXER_BUILD generic
#include "backends/linear/linear_kernel.inc"
