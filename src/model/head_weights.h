// Tensors of a speculative-decoding head file (Medusa heads, an EAGLE draft layer) read from
// safetensors: looked up with their shape checked (the error names the tensor, both shapes and
// why the shape is expected), vectors as floats, matrices kept as stored or quantized at load
// and interleaved for the matmul kernels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "format/safetensors.h"
#include "tensor/tensor_view.h"

namespace inflight {

class Model;

class HeadWeights {
 public:
  // what: the error messages' prefix ("medusa heads"). weights: the matrices' type in memory
  // (kF16/kBF16/kF32: the file's own; kQ8_0/kQ4_0: quantized at load, for matrices whose
  // columns are a multiple of 32).
  HeadWeights(std::string what, const SafetensorsFile& file, DType weights)
      : what_(std::move(what)), file_(file), weights_(weights) {}
  // INVALID_ARGUMENT unless weights is one of the types above.
  static Status CheckWeightType(const std::string& what, DType weights);

  // NOT_FOUND when absent; INVALID_ARGUMENT for another shape (`why` says what it should
  // match) or a type other than F32/F16/BF16.
  StatusOr<const SafetensorsTensor*> Get(const std::string& name, const std::vector<int64_t>& shape,
                                         const std::string& why) const;
  // Every element as F32 (a tensor Get accepted).
  static std::vector<float> ToFloats(const SafetensorsTensor& t);
  // A 2-D tensor Get accepted, in the matmul kernels' form; the copies live in this object.
  TensorView Matrix(const SafetensorsTensor& t);
  std::vector<AlignedBuffer>& owned() { return owned_; }

 private:
  std::string what_;
  const SafetensorsFile& file_;
  DType weights_;
  std::vector<AlignedBuffer> owned_;
};

// Random head weights for benchmarks and tests: a cheap deterministic draw, the sum of 4
// uniform(-0.5, 0.5) from a 64-bit LCG (mean 0, deviation ~0.58), the same on any machine.
class CheapNormal {
 public:
  explicit CheapNormal(uint64_t seed) : state_(seed) {}
  float Next() {
    float sum = 0;
    for (int i = 0; i < 4; ++i) {
      state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
      sum += static_cast<float>(state_ >> 40) / static_cast<float>(1 << 24) - 0.5f;
    }
    return sum;
  }

 private:
  uint64_t state_;
};

// The model's output projection as floats [vocab, hidden] (its product with the identity, in
// row blocks): heads written for benchmarks and tests copy it.
std::vector<float> OutputProjectionFloats(const Model& base, ThreadPool& pool);

}  // namespace inflight
