// A non-owning view of a (at most 2-D) weight tensor in its stored type.
#pragma once

#include <cstdint>
#include <string>

#include "tensor/dtype.h"

namespace inflight {

struct TensorView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;  // outer dimension (1 for a vector)
  int64_t cols = 0;  // inner, contiguous dimension

  bool empty() const { return data == nullptr; }
  int64_t row_bytes() const { return DTypeRowBytes(dtype, cols); }
  // Interleaved layouts store 16-row groups (see DType::kQ8_0x16); row() does not apply.
  bool interleaved() const {
    return static_cast<uint32_t>(dtype) >= static_cast<uint32_t>(DType::kQ8_0x16);
  }
  int64_t num_bytes() const {
    const int64_t stored_rows =
        interleaved() ? (rows + kInterleaveRows - 1) / kInterleaveRows * kInterleaveRows : rows;
    return stored_rows * row_bytes();
  }
  const uint8_t* row(int64_t r) const {
    return static_cast<const uint8_t*>(data) + r * row_bytes();
  }
  const float* f32() const { return static_cast<const float*>(data); }
};

}  // namespace inflight
