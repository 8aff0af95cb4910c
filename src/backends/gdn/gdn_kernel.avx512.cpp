// Gated delta rule built with AVX-512 flags (chosen at run time).
#define ATTN_MIXER_BUILD avx512
#include "backends/gdn/gdn_kernel.inc"
