// Per-level tables, visible only inside the kernels library.
#pragma once

#include "kernels/kernels.h"

namespace inflight::kernels {
const KernelTable& ScalarKernelTable();
const KernelTable& Avx512KernelTable();  // defined only when built with AVX-512 support
}  // namespace inflight::kernels

namespace inflight::kernels {
struct PackedLayout;
// The AVX-512 matmul over interleaved block-format records (kernels_avx512_packed.cc).
void MatMulPackedAvx512(const PackedLayout& l, const TensorView& w, int64_t row_begin,
                        int64_t row_end, const QuantizedRows& x, int64_t num_tokens, float* y,
                        int64_t y_stride);
}  // namespace inflight::kernels
