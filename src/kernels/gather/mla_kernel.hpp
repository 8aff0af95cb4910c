#pragma once
/// The MLA inner kernel: a group of query rows (all heads of one or a few query tokens) against
/// a list of latent cache entries, with an online softmax. Every row of the group reads each
/// cache entry from the same converted chunk, so all heads of a token share one cache read.
/// Compiled once per ISA (mla_kernel.cpp portable, mla_kernel.avx512.cpp) from mla_kernel.inl.
#include <cstdint>
#include <string>

#include "attn/kv_cache.hpp"
#include "attn/platform.hpp"
#include "cpu/isa.hpp"

namespace attn::mla {

/// Keys per converted chunk: 32 entries of 576 floats (72 KiB) stay in L2 while every row of
/// the group streams them.
constexpr int kChunk = 32;

struct AttendArgs {
  const PagedKV* kv = nullptr;     // MLA layout: entry = [latent (rank) | rope] (or an fp8_ds_mla entry)
  float kv_scale = 1.0f;           // dequantized = stored * kv_scale (fp8_ds_mla: unused, per-tile scales)
  int width = 0;                   // kv_lora_rank + rope (entry width, q width)
  int rank = 0;                    // kv_lora_rank (output width, the V part of the entry)
  // Separate-V caches (block-sparse over NHD/HND): K at entry + k_offset, V at entry + v_offset
  // (elements). v_offset < 0: V is the first `rank` values of the K entry (MLA).
  int64_t k_offset = 0;
  int64_t v_offset = -1;
  float v_scale = 1.0f;
  const float* q = nullptr;        // [rows][width], pre-multiplied by scale * log2(e)
  float q_mul = 0.0f;              // that multiplier when known (> 0): lets the AMX kernel
                                   // recover bf16 q exactly instead of splitting it hi + lo
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
/// Requires avx512_bf16 as well. Runs the vdpbf16ps kernel (mla_bf16.hpp) for the calls
/// bf16_handles() accepts and the avx512 one for the others.
AttendFn attend_avx512_bf16();
/// Caches stored as bf16 or fp8 (exact in bf16), even entry width, rank % 16 == 0, and fp8_ds_mla
/// MLA entries (tile scales applied outside the bf16 products).
bool bf16_handles(const AttendArgs& args);
/// The same test from a layer's cache storage dtype and rank (for variant names).
bool bf16_handles_storage(DType cache_dtype, int rank);
/// Requires amx_tile/amx_bf16 + avx512_bf16 and the OS permission (cpu::amx_permitted). Runs the
/// AMX kernel for the calls amx_handles() accepts and the avx512 one for the others.
AttendFn attend_amx();
/// MLA latent entries (V inside K) stored as bf16 or fp8 (exact in bf16), rank % 32 == 0; not
/// fp8_ds_mla (served by the avx512 kernel: this machine has no AMX to test a tile-scaled pack on).
bool amx_handles(const AttendArgs& args);
/// The same test from a layer's cache storage dtype (for variant names).
bool amx_handles_storage(DType cache_dtype);

/// The kernel builds (src/cpu/isa.hpp): amx, avx512_bf16, avx512, generic. ATTN_CPU_ISA forces
/// one (tests run every build that way); an unknown or unrunnable value is an Error.
using cpu::Isa;
/// The build's name in variants: "amx", "avx512_bf16", "avx512" or "generic" (cpu::to_string).
std::string_view variant_name(Isa isa);
/// What `platform` supports, or the build ATTN_CPU_ISA forces. On the detected CPU, amx also
/// needs the OS permission for AMX tile data (cpu::amx_permitted; denied → avx512_bf16).
/// latent = false: callers with separate K/V rows (block-sparse), which AMX never serves.
Isa chosen_isa(const Platform& platform, bool latent = true);
/// The kernel variant a platform gets: "amx", "avx512_bf16", "avx512" or "generic" (cpu::to_string).
std::string variant_for(const Platform& platform, bool latent = true);
/// Median over `samples` runs of the product instruction's peak on `threads` threads, GFLOP/s
/// (2 per multiply-add): vdpbf16ps for avx512_bf16, fp32 FMA for avx512; 0 where not measured
/// (amx, generic).
double product_peak_gflops(Isa isa, int threads, int samples);
/// The best attend function for this CPU and its name.
AttendFn best_attend(std::string* name = nullptr);

}  // namespace attn::mla
