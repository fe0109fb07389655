// Shared weight plumbing for the loaders: a source of named raw tensors (GGUF, safetensors,
// llama2.c) and the one place that maps llama.cpp tensor names onto ModelWeights.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "model/model.h"

namespace inflight {

struct RawTensor {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  std::vector<int64_t> dims;  // ggml order: dims[0] contiguous
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool Has(const std::string& name) const = 0;
  // NOT_FOUND when absent, UNIMPLEMENTED for an unsupported type.
  virtual StatusOr<RawTensor> Get(const std::string& name) const = 0;
};

// A 1-D tensor of `expected` elements as F32 (any float type).
StatusOr<std::vector<float>> LoadVector(const WeightSource& src, const std::string& name,
                                        int64_t expected);
// A 2-D matrix [rows, cols] (ggml dims {cols, rows}) as a view; shape checked.
StatusOr<TensorView> LoadMatrix(const WeightSource& src, const std::string& name, int64_t rows,
                                int64_t cols);
// DATA_LOSS when a quantized tensor has a NaN or infinite block scale (a corrupt file).
Status CheckBlockScales(const std::string& name, const RawTensor& t, int64_t num_elements);
// Reads every tensor of model->config_ by llama.cpp names (token_embd, blk.N.attn_q, ...).
Status LoadStandardWeights(const WeightSource& src, Model* model);

}  // namespace inflight
