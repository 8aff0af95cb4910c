// Gated delta rule, portable build.
#define ATTN_MIXER_BUILD generic
#include "backends/gdn/gdn_kernel.inc"
