// Scalar half / bfloat16 conversions (round to nearest even). SIMD kernels use F16C /
// AVX512-BF16 instructions; these are the portable reference.
#pragma once

#include <cstdint>
#include <cstring>

namespace inflight {

inline float Fp32FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint32_t BitsFromFp32(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

inline float Fp16ToFp32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    if (mant == 0) return Fp32FromBits(sign);
    // Subnormal: normalise.
    exp = 1;
    while ((mant & 0x400) == 0) {
      mant <<= 1;
      exp--;
    }
    mant &= 0x3ff;
    return Fp32FromBits(sign | ((exp + 112) << 23) | (mant << 13));
  }
  if (exp == 31) return Fp32FromBits(sign | 0x7f800000 | (mant << 13));
  return Fp32FromBits(sign | ((exp + 112) << 23) | (mant << 13));
}

inline uint16_t Fp32ToFp16(float f) {
  uint32_t x = BitsFromFp32(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  x &= 0x7fffffff;
  if (x >= 0x7f800000) return (uint16_t)(sign | 0x7c00 | (x > 0x7f800000 ? 0x200 : 0));
  if (x >= 0x477ff000) return (uint16_t)(sign | 0x7c00);  // overflow -> inf
  if (x < 0x38800000) {                                   // subnormal or zero in half
    if (x < 0x33000000) return (uint16_t)sign;
    const uint32_t exp = x >> 23;
    uint32_t mant = (x & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - exp;  // 14 + (113 - exp)... places mantissa into 10 bits
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1))) half++;
    return (uint16_t)(sign | half);
  }
  uint32_t half = ((x >> 13) - (112 << 10));
  const uint32_t rem = x & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++;
  return (uint16_t)(sign | half);
}

inline float Bf16ToFp32(uint16_t b) { return Fp32FromBits((uint32_t)b << 16); }

inline uint16_t Fp32ToBf16(float f) {
  uint32_t x = BitsFromFp32(f);
  if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);  // quiet NaN
  x += 0x7fff + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

}  // namespace inflight
