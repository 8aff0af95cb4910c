// Gated delta rule, portable build.
#define ATTN_MIXER_ISA generic
#include "backends/gdn/gdn_kernel.inc"
