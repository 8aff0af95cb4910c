#pragma once
/// The KV storage element types the vector traits (simd_*.hpp) widen, and the e4m3 widening
/// shared by every kernel build. In namespace attn::cpu_flash, where they were written: cpu_flash's
/// kernels and the MLA attend kernel (src/kernels/gather) read them there.
#include <cstdint>

namespace attn::cpu_flash {

/// KV storage element types the kernels dequantize in registers.
/// i8: int8 codes (int8_per_token_head caches; each slot's scale is in PagedKV::k/v_token_scales).
/// i4: bytes of two int4 codes (int4_per_token_head HND_PAIRS caches, read by the decode pair
/// kernel; the general kernel unpacks int4 rows to bf16 and reads them as bf16).
enum class KvType : uint8_t { f32, f16, bf16, e4m3, e5m2, i8, i4 };
constexpr int kNumKvTypes = 7;
/// Bytes of one stored element (every kernel build addresses cache rows with it).
template <KvType T>
constexpr int kv_bytes() {
  return T == KvType::f32 ? 4 : (T == KvType::f16 || T == KvType::bf16) ? 2 : 1;
}

/// e4m3 bytes are widened by placing their bits in an fp16 (sign to bit 15, exponent+mantissa
/// to bits 14..7) and converting: exact, subnormals included, but 2^8 too small. The 2^8 is
/// folded into the K scale (logits) and V scale (output) instead of a multiply per element.
/// (Placing them in an fp32 instead would leave values near 2^-120, whose products with small
/// probabilities are fp32 denormals: slow microcode assists.)
inline constexpr float kE4m3Rebias = 256.0f;
/// fp16 bits of an e4m3 byte, scaled by 2^-8; the NaN codes (S.1111.111) stay NaN.
constexpr uint16_t e4m3_as_f16_bits(uint8_t x) {
  return uint16_t(((x & 0x80) << 8) | ((x & 0x7f) << 7) | ((x & 0x7f) == 0x7f ? 0x7e00 : 0));
}

}  // namespace attn::cpu_flash
