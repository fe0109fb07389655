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
  kQ8_0 = 8,
  kBF16 = 30,
  kI8 = 24,   // ggml GGML_TYPE_I8
  kI32 = 26,  // ggml GGML_TYPE_I32
  // Engine-internal layouts (never in files): Q8_0 / Q4_0 matrices with 16 rows interleaved
  // per 32-column block for the VNNI kernels (see kernels/interleave.h). Same bytes per
  // element as their source; a partial last group is padded with zero rows.
  kQ8_0x16 = 1000,
  kQ4_0x16 = 1001,
};
constexpr int kInterleaveRows = 16;

// A block of 32 weights sharing one F16 scale: w = d * q.
constexpr int kQBlock = 32;
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

// Elements per block (1 for plain types).
int64_t DTypeBlockSize(DType t);
// Bytes per block.
int64_t DTypeBlockBytes(DType t);
// Bytes of a row of `n` elements; n must be a multiple of the block size.
inline int64_t DTypeRowBytes(DType t, int64_t n) {
  return n / DTypeBlockSize(t) * DTypeBlockBytes(t);
}
const char* DTypeName(DType t);
// nullopt for ids this engine does not support (K-quants and others).
std::optional<DType> DTypeFromGgmlId(uint32_t id);
// Name of a ggml type id even when unsupported ("q4_K"), for error messages.
std::string GgmlTypeName(uint32_t id);
std::optional<DType> DTypeFromName(std::string_view name);  // "f32", "q8_0", ...

}  // namespace inflight
