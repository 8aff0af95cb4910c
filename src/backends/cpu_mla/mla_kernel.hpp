#pragma once
/// The MLA inner kernel: a group of query rows (all heads of one or a few query tokens) against
/// a list of latent cache entries, with an online softmax. Every row of the group reads each
/// cache entry from the same converted chunk, so all heads of a token share one cache read.
/// Compiled once per ISA (mla_kernel.cpp portable, mla_kernel.avx512.cpp) from mla_kernel.inl.
#include <cstdint>
#include <string>

#include "attn/kv_cache.hpp"
#include "attn/platform.hpp"

namespace attn::mla {

/// Keys per converted chunk: 32 entries of 576 floats (72 KiB) stay in L2 while every row of
/// the group streams them.
constexpr int kChunk = 32;

struct AttendArgs {
  const PagedKV* kv = nullptr;     // MLA layout: entry = [latent (rank) | rope]
  float kv_scale = 1.0f;           // dequantized = stored * kv_scale
  int width = 0;                   // kv_lora_rank + rope (entry width, q width)
  int rank = 0;                    // kv_lora_rank (output width, the V part of the entry)
  // Separate-V caches (block-sparse over NHD/HND): K at entry + k_offset, V at entry + v_offset
  // (elements). v_offset < 0: V is the first `rank` values of the K entry (MLA).
  int64_t k_offset = 0;
  int64_t v_offset = -1;
  float v_scale = 1.0f;
  const float* q = nullptr;        // [rows][width], pre-multiplied by scale * log2(e)
  int rows = 0;
  const int32_t* row_limit = nullptr;  // [rows]: row r sees keys [0, row_limit[r]) of the list
  const int64_t* slots = nullptr;  // [num_keys] cache slots (block * block_size + offset)
  int num_keys = 0;
  // Running online-softmax state, base 2: max, sum and unnormalized output.
  float* m = nullptr;              // [rows], start at -inf
  float* l = nullptr;              // [rows], start at 0
  float* acc = nullptr;            // [rows][rank], start at 0
};

using AttendFn = void (*)(const AttendArgs&);

AttendFn attend_portable();
AttendFn attend_avx512();  // requires avx512f/bw/vl + f16c (checked by the caller)

/// The kernel variant a platform gets: "avx512" (avx512f/bw/vl) or "portable".
std::string variant_for(const Platform& platform);
/// The best attend function for this CPU and its name.
AttendFn best_attend(std::string* name = nullptr);

}  // namespace attn::mla
