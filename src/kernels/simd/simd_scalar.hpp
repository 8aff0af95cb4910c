#pragma once
/// Portable traits for cpu_flash's kernel (kernel_impl.hpp): one float per "vector", plain C++
/// (the compiler vectorizes what it can for the baseline ISA). Runs on any CPU, x86 or ARM.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "attn/numeric.hpp"
#include "kernels/simd/kv_type.hpp"

namespace attn::cpu_flash::ATTN_CF_NS {

struct Simd {
  static constexpr int W = 1;
  static constexpr int kAcc = 8;
  using F = float;

  static F zero() { return 0.0f; }
  static F set1(float x) { return x; }
  static F loadu(const float* p) { return *p; }
  static void storeu(float* p, F v) { *p = v; }
  static F add(F a, F b) { return a + b; }
  static F sub(F a, F b) { return a - b; }
  static F mul(F a, F b) { return a * b; }
  static F div(F a, F b) { return a / b; }
  static F max(F a, F b) { return a > b ? a : b; }
  static F fma(F a, F b, F c) { return a * b + c; }
  static F in_register(F v) { return v; }  // as the compiler schedules it: pinning was measured on AVX2 only
  static float hmax(F v) { return v; }
  static float hsum(F v) { return v; }

  template <KvType T>
  static F load_kv(const void* p) {
    if constexpr (T == KvType::f32) return *static_cast<const float*>(p);
    uint16_t h = 0;
    if constexpr (T == KvType::f16 || T == KvType::bf16) std::memcpy(&h, p, 2);
    if constexpr (T == KvType::f16) return f16_to_f32(h);
    if constexpr (T == KvType::bf16) return bf16_to_f32(h);
    const uint8_t x = *static_cast<const uint8_t*>(p);
    if constexpr (T == KvType::e4m3) return f16_to_f32(e4m3_as_f16_bits(x));
    if constexpr (T == KvType::e5m2) return f16_to_f32(uint16_t(x) << 8);
    if constexpr (T == KvType::i8) return float(int8_t(x));
  }
  template <KvType T>
  static F load_kv_tail(const void*, int) { return 0.0f; }  // never called: W = 1

  static F exp(F x) { return std::exp(x); }
  static void reduce(const F* acc, float* out) {
    for (int i = 0; i < kAcc; ++i) out[i] = acc[i];
  }
};

}  // namespace attn::cpu_flash::ATTN_CF_NS
