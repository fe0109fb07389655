// The GGUF block formats beyond Q8_0/Q4_0, as llama.cpp's ggml-common.h lays them out:
// Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4 (32 weights a block), the K-quants Q2_K..Q6_K and IQ4_XS
// (256-weight super-blocks). Every one of them stores w = s * q - o per sub-block of 16 or 32
// weights, with an unsigned integer q, a scale s built from an F16 super-scale and a small
// integer (MXFP4: a power of two), and an optional min o (or a constant offset folded into
// q). UnpackedBlock is that integer form; the kernels' interleaved layouts
// (kernels/packed_layout.h) are built from it.
#pragma once

#include <cstdint>
#include <cstring>

#include "tensor/dtype.h"

namespace inflight::kernels {

// One row's block in integer form. Fields a format does not use stay zero.
struct UnpackedBlock {
  // The stored unsigned quant of each weight: Q4_1/Q4_K/IQ4 index 0..15, Q5_x 0..31, Q6_K 0..63
  // (value q - 32), Q3_K 0..7 (value q - 4), Q2_K 0..3. IQ4 values are kIq4Values[q].
  uint8_t q[kSuperBlock] = {};
  uint16_t d = 0;     // F16 scale (super-scale for K-quants and IQ4_XS)
  uint16_t dmin = 0;  // F16: K-quant min super-scale (Q2_K/Q4_K/Q5_K); Q4_1/Q5_1: the min m
  // Per sub-block scale: Q4_K/Q5_K 8 x 0..63, Q6_K 16 x int8, Q3_K 16 x -32..31,
  // Q2_K 16 x 0..15, IQ4_XS 8 x -32..31.
  int8_t sc[16] = {};
  uint8_t m[16] = {};  // per sub-block min: Q4_K/Q5_K 8 x 0..63, Q2_K 16 x 0..15
  uint8_t e = 0;       // MXFP4: the E8M0 exponent
};

// The IQ4_NL / IQ4_XS non-linear values.
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

// MXFP4 (block_mxfp4: e u8, qs[16] with weight j in the low nibble of qs[j] and weight j + 16
// in the high nibble): w = kMxfp4Values[q] * E8M0ToFp32Half(e). The table holds the E2M1
// values doubled (ggml's kvalues_mxfp4), so the scale is halved: 2^(e - 128).
inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};
// ggml's GGML_E8M0_TO_FP32_HALF: 2^(e - 128) exactly, subnormal for e < 2; 255 (NaN in the OCP
// spec) gives 2^127 as in ggml.
inline float E8M0ToFp32Half(uint8_t e) {
  const uint32_t bits = e < 2 ? uint32_t{0x00200000} << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Whether UnpackBlock/PackBlock/DequantizeBlock handle `t` (the eleven formats above).
bool IsBlockFormat(DType t);

// Native bytes of one block <-> integer form. Pack(Unpack(b)) == b for every byte string
// (unused bits aside: none of these formats has any).
void UnpackBlock(DType t, const uint8_t* src, UnpackedBlock* out);
void PackBlock(DType t, const UnpackedBlock& in, uint8_t* dst);

// The weights of one block, computed from the native bytes with the reference's float
// operations in the reference's order, so the result is bit-identical to ggml's
// dequantize_row_* (and gguf-py's dequantize). out: DTypeBlockSize(t) floats.
void DequantizeBlock(DType t, const uint8_t* src, float* out);

// Index of the first of num_blocks blocks of a quantized file type (Q8_0, Q4_0 or the formats
// above) whose F16 scale or min is NaN or infinite, or whose MXFP4 exponent is 255 (NaN in the
// OCP spec, refused by ggml_validate_row_data): a corrupt file. -1 when all are finite.
int64_t FirstNonFiniteBlock(DType t, const uint8_t* data, int64_t num_blocks);

// Our quantizer for these formats (used by the converter and by tests): min/max scales per
// sub-block, integer sub-scales relative to a super-scale, quants re-rounded against the
// final scales; IQ4 scales are searched over a few candidates. MXFP4 is ggml's
// quantize_row_mxfp4_ref (what llama-quantize writes), bit for bit. n = DTypeBlockSize(t)
// floats.
void QuantizeBlock(DType t, const float* x, uint8_t* dst);

}  // namespace inflight::kernels
