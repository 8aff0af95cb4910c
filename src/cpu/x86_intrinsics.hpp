#pragma once
/// <immintrin.h> for the CPU kernel files (per-ISA *.avx512.cpp / *.avx2.cpp builds and the
/// target-attribute AMX code). GCC 12 flags its own _mm*_undefined_* / _mm512_reduce_* helpers as
/// uninitialized where they are inlined into a kernel (false positives); the warnings name the
/// kernel, not the header, so they stay off for the rest of the including file.
#if defined(__x86_64__) || defined(_M_X64)
#if !defined(__clang__)  // clang has no -Wmaybe-uninitialized (and no such false positives)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#endif
