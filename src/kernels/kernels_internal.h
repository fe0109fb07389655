// Per-level tables, visible only inside the kernels library.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/kernels.h"

namespace inflight::kernels {
const KernelTable& ScalarKernelTable();
const KernelTable& Avx512KernelTable();  // defined only when built with AVX-512 support
}  // namespace inflight::kernels

namespace inflight::kernels {

// F16 and BF16 weights (64-column multiples) are multiplied on the int16 VNNI dot
// (vpdpwssd: 32 multiply-adds per instruction, twice an FP32 FMA's 16, the rate of vdpbf16ps):
// weights and activations as int16 blocks of 64 columns with an F32 scale, |q| <= 5791 so a
// block's 64 products sum exactly in int32 (64 * 5791^2 < 2^31). Error: at most half a step,
// 1/11582 of the block's largest magnitude (weights; activations per token and block), about
// 2^-13.5, against 2^-9 relative for BF16 operands, which moved the golden F16 references'
// probabilities by up to 0.1 (tests/golden_test.cc allows 0.05, and 0.002 for qwen2-f32).
// The same path serves one token and a prompt (batch invariance), so it is the only one.
inline constexpr int kI16Block = 64;
inline constexpr float kI16Max = 5791.0f;
// Per 16-row group and block: scales f32[16], then pair p (columns 2p, 2p+1) of row j at
// bytes 64 + 64 p + 4 j: one 64-byte vector per pair, the vpdpwssd operand of 16 rows.
inline constexpr int kI16RecordBytes = 64 + kI16Block / 2 * 64;
inline constexpr int I16WeightOffset(int lane, int col) {
  return 64 + 64 * (col / 2) + 4 * lane + 2 * (col % 2);
}
// round(v) to int16 as vcvtps2dq (nearest even; NaN and out-of-range to INT32_MIN) then
// vpmovsdw (saturating) do it.
inline int16_t I16Round(float v) {
  const float r = std::nearbyint(v);
  int32_t i = INT32_MIN;
  if (r >= -2147483648.0f && r < 2147483648.0f) i = static_cast<int32_t>(r);
  return static_cast<int16_t>(std::clamp<int32_t>(i, -32768, 32767));
}
// The block's scale d = amax / 5791 (NaN for a block holding a NaN or an infinity, so the
// outputs it touches are NaN, as in F32 arithmetic) and the multiplier of the quants: 0 for an
// all-zero block, a non-finite scale, or one too small to invert (the quants would leave the
// int16 range; such a block's products are below 1e-70 anyway).
inline float I16Scale(float amax, bool finite = true) {
  return finite ? amax / kI16Max : std::numeric_limits<float>::quiet_NaN();
}
inline float I16Inverse(float d) {
  const float inv = 1.0f / d;
  return d != 0.0f && std::isfinite(inv) ? inv : 0.0f;
}

// The AVX-512 int16-block kernels (kernels_avx512_i16.cc): the activations' blocks, and the
// matmul over kI16x16 weights with activations already in blocks.
void QuantizeRowsI16Avx512(const float* x, int64_t num_tokens, int64_t cols, int16_t* q, float* d);
void MatMulI16Avx512(const TensorView& w, int64_t row_begin, int64_t row_end, const int16_t* q,
                     const float* d, int64_t num_tokens, float* y, int64_t y_stride);

// The AVX-512 attention kernel (kernels_avx512_attention.cc).
void AttendRowsAvx512(const KvLayerView& kv, const AttendRowsArgs& args, float* scratch);
// Over 8-bit K/V (kernels_avx512_attention_i8.cc); false: a head size it has no kernel for.
bool AttendRowsI8Avx512(const KvLayerView& kv, const AttendRowsArgs& args, float* scratch);

struct PackedLayout;
// The AVX-512 matmul over interleaved block-format records (kernels_avx512_packed.cc).
void MatMulPackedAvx512(const PackedLayout& l, const TensorView& w, int64_t row_begin,
                        int64_t row_end, const QuantizedRows& x, int64_t num_tokens, float* y,
                        int64_t y_stride);
}  // namespace inflight::kernels
