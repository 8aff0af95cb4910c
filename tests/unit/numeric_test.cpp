// Scalar conversions (numeric.hpp), checked exhaustively over every code of each format:
// decode against an independent definition (the compiler's _Float16 for f16, the bit layout
// for bf16, the OCP fp8 formulas for e4m3fn / e5m2), round trips, round-to-nearest-even at every
// midpoint between adjacent codes, saturation, NaN and subnormals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "attn/numeric.hpp"

namespace {

using namespace attn;

// An independent binary16 definition: the compiler's _Float16 (g++, clang >= 15); clang 14 lacks
// it on x86 without AVX512-FP16 (and its __fp16 needs compiler-rt), so there the F16C
// instructions convert (round to nearest even), which every AVX2 machine has.
#if defined(__clang__) && __clang_major__ < 15 && defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("f16c"))) float compiler_half_to_float(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) uint16_t compiler_float_to_half(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
#else
float compiler_half_to_float(uint16_t h) {
  _Float16 x;
  std::memcpy(&x, &h, 2);
  return float(x);
}
uint16_t compiler_float_to_half(float f) {
  const _Float16 h = _Float16(f);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}
#endif

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// --- independent decoders -------------------------------------------------------------------

float f16_decode_ref(uint16_t h) { return compiler_half_to_float(h); }

// OCP FP8: e4m3fn (bias 7, no inf, S.1111.111 = NaN) and e5m2 (bias 15, IEEE-like inf / NaN).
double fp8_decode_ref(uint8_t v, int exp_bits, int man_bits, bool ieee_specials) {
  const int sign = v >> 7, e = (v >> man_bits) & ((1 << exp_bits) - 1), m = v & ((1 << man_bits) - 1);
  const int bias = (1 << (exp_bits - 1)) - 1, emax_code = (1 << exp_bits) - 1;
  double x;
  if (ieee_specials && e == emax_code) x = m ? std::nan("") : HUGE_VAL;
  else if (!ieee_specials && e == emax_code && m == (1 << man_bits) - 1) x = std::nan("");
  else if (e == 0) x = m * std::pow(2.0, 1 - bias - man_bits);
  else x = (1.0 + m / double(1 << man_bits)) * std::pow(2.0, e - bias);
  return sign ? -x : x;
}

double e4m3_ref(uint8_t v) { return fp8_decode_ref(v, 4, 3, false); }
double e5m2_ref(uint8_t v) { return fp8_decode_ref(v, 5, 2, true); }

// Checks RNE between every pair of adjacent positive codes lo, lo+1 of a format: the exact
// midpoint goes to the code with an even mantissa, the floats just either side to the nearer.
template <typename Decode, typename Encode, typename Code>
void expect_rne_at_midpoints(Decode decode, Encode encode, Code first, Code last_finite, const char* what) {
  int failures = 0;
  for (uint32_t lo = first; lo < uint32_t(last_finite) && failures < 5; ++lo) {
    const float a = decode(Code(lo)), b = decode(Code(lo + 1));
    const float mid = float((double(a) + double(b)) / 2);  // exact: one bit more than the format
    const Code even = (lo % 2 == 0) ? Code(lo) : Code(lo + 1);
    const Code got_mid = encode(mid), got_below = encode(std::nextafter(mid, 0.0f)), got_above = encode(std::nextafter(mid, kInf));
    if (got_mid != even || got_below != Code(lo) || got_above != Code(lo + 1)) {
      ADD_FAILURE() << what << ": between codes 0x" << std::hex << lo << " and 0x" << lo + 1 << " (" << a << ", " << b
                    << "): mid→0x" << uint32_t(got_mid) << " below→0x" << uint32_t(got_below) << " above→0x"
                    << uint32_t(got_above);
      ++failures;
    }
    // Negative side mirrors the positive side.
    const Code sign = Code(Code(1) << (sizeof(Code) * 8 - 1));
    if (encode(-mid) != Code(even | sign)) {
      ADD_FAILURE() << what << ": negative midpoint near code 0x" << std::hex << lo;
      ++failures;
    }
  }
}

// --- bfloat16 -------------------------------------------------------------------------------

TEST(NumericBf16, DecodeIsTheHighHalfOfFloat32) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = bf16_to_f32(uint16_t(h));
    ASSERT_EQ(f32_bits(f), h << 16) << std::hex << h;
  }
}

TEST(NumericBf16, EveryCodeRoundTrips) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = bf16_to_f32(uint16_t(h));
    const uint16_t back = f32_to_bf16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(bf16_to_f32(back))) << std::hex << h;
      ASSERT_EQ(back & 0x8000, h & 0x8000) << "NaN keeps its sign, code " << std::hex << h;
    } else {
      ASSERT_EQ(back, h) << std::hex << h;
    }
  }
}

TEST(NumericBf16, RoundsToNearestEvenAtEveryMidpoint) {
  // 0x7f7f is the largest finite code; its upper neighbour 0x7f80 is +inf (even), which IEEE
  // rounding reaches from the midpoint.
  expect_rne_at_midpoints(bf16_to_f32, f32_to_bf16, uint16_t(0), uint16_t(0x7f7f), "bf16");
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80) << "FLT_MAX rounds up to +inf";
}

TEST(NumericBf16, NaNStaysNaNEvenWhenOnlyLowBitsAreSet) {
  // A signalling NaN whose payload lives only in the dropped 16 bits must not become inf.
  const float snan = bits_f32(0x7f800001u);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(snan))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(-kNaN))));
  EXPECT_EQ(f32_to_bf16(kInf), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-kInf), 0xff80);
}

TEST(NumericBf16, SubnormalsAreKept) {
  const float tiny = bits_f32(0x00010000u);  // smallest bf16 subnormal
  EXPECT_EQ(f32_to_bf16(tiny), 0x0001);
  EXPECT_EQ(f32_to_bf16(-tiny), 0x8001);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x00008000u)), 0x0000) << "half the smallest subnormal ties to even (zero)";
}

// --- float16 --------------------------------------------------------------------------------

TEST(NumericF16, DecodeMatchesCompilerFloat16ForEveryCode) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float got = f16_to_f32(uint16_t(h)), want = f16_decode_ref(uint16_t(h));
    if (std::isnan(want)) ASSERT_TRUE(std::isnan(got)) << std::hex << h;
    else ASSERT_EQ(f32_bits(got), f32_bits(want)) << std::hex << h;  // bitwise: keeps -0
  }
}

TEST(NumericF16, EveryCodeRoundTrips) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = f16_to_f32(uint16_t(h));
    const uint16_t back = f32_to_f16(f);
    if (std::isnan(f)) ASSERT_TRUE(std::isnan(f16_to_f32(back))) << std::hex << h;
    else ASSERT_EQ(back, h) << std::hex << h;
  }
}

TEST(NumericF16, RoundsToNearestEvenAtEveryMidpoint) {
  expect_rne_at_midpoints(f16_to_f32, f32_to_f16, uint16_t(0), uint16_t(0x7bff), "f16");
}

TEST(NumericF16, EncodeMatchesCompilerFloat16OnASweepOfFloats) {
  // Every 4099th float32 bit pattern (~1M values) covers normals, subnormals, overflow and NaN.
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4099) {
    const float f = bits_f32(uint32_t(u));
    const uint16_t want = compiler_float_to_half(f);
    const uint16_t got = f32_to_f16(f);
    if (std::isnan(f)) ASSERT_TRUE(std::isnan(f16_to_f32(got))) << std::hex << u;
    else ASSERT_EQ(got, want) << "float bits 0x" << std::hex << u;
  }
}

TEST(NumericF16, OverflowAndSubnormalBoundaries) {
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.996f), 0x7bff) << "just below the overflow midpoint";
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00) << "the midpoint to 65536 rounds to inf";
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-kInf), 0xfc00);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001) << "smallest subnormal";
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000) << "half of it ties to even zero";
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002) << "1.5 ulp ties to even (2)";
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400) << "smallest normal";
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
}

// --- fp8 ------------------------------------------------------------------------------------

TEST(NumericFp8E4M3, DecodeMatchesTheOcpDefinitionForEveryCode) {
  for (int v = 0; v < 256; ++v) {
    const double want = e4m3_ref(uint8_t(v));
    const float got = fp8_e4m3_to_f32(uint8_t(v));
    if (std::isnan(want)) ASSERT_TRUE(std::isnan(got)) << v;
    else ASSERT_EQ(double(got), want) << "code " << v;
  }
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0xff)));
  EXPECT_FALSE(std::isinf(fp8_e4m3_to_f32(0x78))) << "e4m3fn has no inf: 0x78 is 256";
}

TEST(NumericFp8E5M2, DecodeMatchesTheOcpDefinitionForEveryCode) {
  for (int v = 0; v < 256; ++v) {
    const double want = e5m2_ref(uint8_t(v));
    const float got = fp8_e5m2_to_f32(uint8_t(v));
    if (std::isnan(want)) ASSERT_TRUE(std::isnan(got)) << v;
    else ASSERT_EQ(double(got), want) << "code " << v;
  }
  EXPECT_EQ(fp8_e5m2_to_f32(0x7b), 57344.0f);
  EXPECT_TRUE(std::isinf(fp8_e5m2_to_f32(0x7c)));
  EXPECT_EQ(fp8_e5m2_to_f32(0x01), std::ldexp(1.0f, -16));
}

TEST(NumericFp8E4M3, EveryFiniteCodeRoundTrips) {
  for (int v = 0; v < 256; ++v) {
    const float f = fp8_e4m3_to_f32(uint8_t(v));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_fp8_e4m3(f), uint8_t(v)) << "code " << v;
  }
}

TEST(NumericFp8E5M2, EveryFiniteCodeRoundTrips) {
  for (int v = 0; v < 256; ++v) {
    const float f = fp8_e5m2_to_f32(uint8_t(v));
    if (!std::isfinite(f)) continue;
    ASSERT_EQ(f32_to_fp8_e5m2(f), uint8_t(v)) << "code " << v;
  }
}

TEST(NumericFp8E4M3, RoundsToNearestEvenAtEveryMidpoint) {
  expect_rne_at_midpoints(fp8_e4m3_to_f32, f32_to_fp8_e4m3, uint8_t(0), uint8_t(0x7e), "e4m3");
}

TEST(NumericFp8E5M2, RoundsToNearestEvenAtEveryMidpoint) {
  expect_rne_at_midpoints(fp8_e5m2_to_f32, f32_to_fp8_e5m2, uint8_t(0), uint8_t(0x7b), "e5m2");
}

TEST(NumericFp8E4M3, SaturatesAtPlusMinus448) {
  for (float f : {448.0f, 449.0f, 464.0f, 480.0f, 1e6f, kInf}) {
    EXPECT_EQ(f32_to_fp8_e4m3(f), 0x7e) << f;
    EXPECT_EQ(f32_to_fp8_e4m3(-f), 0xfe) << -f;
  }
}

TEST(NumericFp8E5M2, SaturatesAtPlusMinus57344) {
  for (float f : {57344.0f, 61439.0f, 61440.0f, 1e9f, kInf}) {
    EXPECT_EQ(f32_to_fp8_e5m2(f), 0x7b) << f;
    EXPECT_EQ(f32_to_fp8_e5m2(-f), 0xfb) << -f;
  }
}

TEST(NumericFp8, NaNEncodesToNaN) {
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(f32_to_fp8_e4m3(kNaN))));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(f32_to_fp8_e4m3(-kNaN))));
  EXPECT_TRUE(std::isnan(fp8_e5m2_to_f32(f32_to_fp8_e5m2(kNaN))));
  EXPECT_TRUE(std::isnan(fp8_e5m2_to_f32(f32_to_fp8_e5m2(-kNaN))));
}

TEST(NumericFp8, SubnormalsAndTinyValues) {
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(1.0f, -10)), 0x00) << "half the smallest subnormal ties to zero";
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(3.0f, -10)), 0x02) << "1.5 ulp ties to even";
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(7.5f, -9)), 0x08) << "rounds up into the smallest normal";
  EXPECT_EQ(f32_to_fp8_e4m3(1e-30f), 0x00);
  EXPECT_EQ(f32_to_fp8_e4m3(-1e-30f), 0x80) << "sign of an underflowed value is kept";
  EXPECT_EQ(f32_to_fp8_e5m2(std::ldexp(1.0f, -17)), 0x00);
  EXPECT_EQ(f32_to_fp8_e5m2(std::ldexp(1.5f, -16)), 0x02);
}

}  // namespace
