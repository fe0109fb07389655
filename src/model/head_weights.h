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

  bool Has(const std::string& name) const { return file_.tensors().count(name) > 0; }
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

// The model's output projection as floats [vocab, hidden] (its product with the identity, in
// row blocks): heads written for benchmarks and tests copy it.
std::vector<float> OutputProjectionFloats(const Model& base, ThreadPool& pool);

}  // namespace inflight
