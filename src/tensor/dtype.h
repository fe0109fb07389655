// Element types, with the numeric ids GGUF uses (ggml_type), and the quantized block layouts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace inflight {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kBF16 = 30,
  kI8 = 24,   // ggml GGML_TYPE_I8
  kI32 = 26,  // ggml GGML_TYPE_I32
  // OCP microscaling FP4 (gpt-oss experts): 32 E2M1 weights sharing one E8M0 exponent
  // (kernels/quant_blocks.h).
  kMXFP4 = 39,
  // Engine-internal layouts (never in files): quantized matrices with 16 rows interleaved per
  // block for the VNNI kernels (see kernels/interleave.h). A partial last group is padded with
  // zero rows. Q8_0x16 / Q4_0x16 keep their source's bytes per element; the others hold the
  // same bits with their scales unpacked (see kernels/packed_layout.h).
  kQ8_0x16 = 1000,
  kQ4_0x16 = 1001,
  kQ4_1x16 = 1002,
  kQ5_0x16 = 1003,
  kQ5_1x16 = 1004,
  kQ2_Kx16 = 1005,
  kQ3_Kx16 = 1006,
  kQ4_Kx16 = 1007,
  kQ5_Kx16 = 1008,
  kQ6_Kx16 = 1009,
  kIQ4_NLx16 = 1010,
  kIQ4_XSx16 = 1011,
  // F16 / BF16 matrices as 16-row panels, column-major inside a panel: the 16 rows' values of
  // column c are 32 consecutive bytes (one vector), for the FMA kernel.
  kF16x16 = 1012,
  kBF16x16 = 1013,
  // F16 / BF16 matrices for the int16 VNNI kernel (vpdpwssd, see kernels/interleave.h): per
  // 16-row group and 64-column block, the 16 rows' F32 scales, then 32 column pairs x 16 rows
  // x 2 int16 (|q| <= 5791). Bytes per row and block: 132.
  kI16x16 = 1014,
  // MXFP4 in the block-format records of kernels/packed_layout.h (its 17 bytes per block).
  kMXFP4x16 = 1015,
};
constexpr int kInterleaveRows = 16;

// A block of 32 weights sharing one F16 scale: w = d * q.
constexpr int kQBlock = 32;
// K-quant and IQ4_XS super-blocks hold 256 weights.
constexpr int kSuperBlock = 256;
struct BlockQ8_0 {
  uint16_t d;  // F16 scale
  int8_t qs[kQBlock];
};
// w[j] = d * ((qs[j] & 15) - 8) for j < 16 and d * ((qs[j - 16] >> 4) - 8) for j >= 16.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQBlock / 2];
};
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_0) == 18);
// The other GGUF block layouts are described in kernels/quant_blocks.h.

// Elements per block (1 for plain types).
int64_t DTypeBlockSize(DType t);
// Bytes per block.
int64_t DTypeBlockBytes(DType t);
// Bytes of a row of `n` elements; n must be a multiple of the block size.
inline int64_t DTypeRowBytes(DType t, int64_t n) {
  return n / DTypeBlockSize(t) * DTypeBlockBytes(t);
}
const char* DTypeName(DType t);
// Whether t is a quantized type stored in files (Q4_0 ... IQ4_XS, MXFP4; not F16 or the x16
// layouts).
bool IsQuantizedFileType(DType t);
// nullopt for ids this engine does not support (IQ2/IQ3 and others).
std::optional<DType> DTypeFromGgmlId(uint32_t id);
// Name of a ggml type id even when unsupported ("iq2_xs"), for error messages.
std::string GgmlTypeName(uint32_t id);
std::optional<DType> DTypeFromName(std::string_view name);  // "f32", "q8_0", "q4_k", ...
// Names DTypeFromName accepts for weights, comma separated (for help and error messages).
const char* WeightDTypeNames();

}  // namespace inflight
