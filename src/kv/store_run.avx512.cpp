// The AVX-512 store build (AVX512F + BW): same code as the portable one, with the line transposes
// and row conversions in registers.
#define ATTN_STORE_RUN_NAME store_run_avx512
#include "kv/store_run_impl.hpp"
