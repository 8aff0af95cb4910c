#pragma once
/// The one thread-count rule of every parallel region: a request > 0 is taken as given, 0 means
/// OpenMP's default (OMP_NUM_THREADS, else the cores); both are clamped to [1, limits::kMaxThreads]
/// because an OpenMP runtime asked for more threads than it can start crashes. Private.
#include <algorithm>

#include <omp.h>

#include "attn/limits.hpp"

namespace attn::cpu {

inline int team_size(int requested = 0) {
  const int n = requested > 0 ? requested : omp_get_max_threads();
  return std::clamp(n, 1, limits::kMaxThreads);
}

}  // namespace attn::cpu
