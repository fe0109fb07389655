// Weight quantization (F32 -> stored type), as llama.cpp does it, for the model writer and
// the converter.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace inflight::kernels {

// Writes DTypeRowBytes(dtype, n) bytes; n must be a multiple of the block size.
void QuantizeRow(DType dtype, const float* x, int64_t n, uint8_t* out);

}  // namespace inflight::kernels
