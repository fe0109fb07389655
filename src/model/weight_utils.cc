#include "model/weight_utils.h"

#include "base/fp16.h"
#include "kernels/kernels.h"
#include "kernels/quant_blocks.h"
#include "model/families.h"

namespace inflight {
namespace {

std::string ShapeString(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace

// A quantized tensor whose scales are NaN or infinite is corrupt: refuse it at load rather
// than serve NaN logits.
Status CheckBlockScales(const std::string& name, const RawTensor& t, int64_t num_elements) {
  if (!IsQuantizedFileType(t.dtype)) return OkStatus();
  const int64_t bad = kernels::FirstNonFiniteBlock(t.dtype, static_cast<const uint8_t*>(t.data),
                                                   num_elements / DTypeBlockSize(t.dtype));
  if (bad < 0) return OkStatus();
  return DataLossError("tensor '" + name + "' (" + DTypeName(t.dtype) +
                       ") has a NaN or infinite scale in block " + std::to_string(bad) +
                       ": the file is corrupt");
}

StatusOr<std::vector<float>> LoadVector(const WeightSource& src, const std::string& name,
                                        int64_t expected) {
  ASSIGN_OR_RETURN(RawTensor t, src.Get(name));
  int64_t n = 1;
  for (int64_t d : t.dims) n *= d;
  if (n != expected) {
    return InvalidArgumentError("tensor '" + name + "' has shape " + ShapeString(t.dims) +
                                ", expected " + std::to_string(expected) + " elements");
  }
  // Integer tensors have no dequantization (a file whose norm or bias is I8 reached a CHECK).
  if (t.dtype == DType::kI8 || t.dtype == DType::kI32)
    return UnimplementedError("tensor '" + name + "' has integer type " + DTypeName(t.dtype));
  std::vector<float> out(n);
  TensorView view{t.data, t.dtype, 1, n};
  if (n % DTypeBlockSize(t.dtype) != 0)
    return InvalidArgumentError("tensor '" + name + "' has a bad length for its type");
  RETURN_IF_ERROR(CheckBlockScales(name, t, n));
  kernels::DequantizeRow(view, 0, out.data());
  return out;
}

StatusOr<TensorView> LoadMatrix(const WeightSource& src, const std::string& name, int64_t rows,
                                int64_t cols) {
  ASSIGN_OR_RETURN(RawTensor t, src.Get(name));
  if (t.dims.size() != 2 || t.dims[0] != cols || t.dims[1] != rows) {
    return InvalidArgumentError("tensor '" + name + "' has shape " + ShapeString(t.dims) +
                                " (ggml order), expected [" + std::to_string(cols) + ", " +
                                std::to_string(rows) + "]");
  }
  if (t.dtype == DType::kI8 || t.dtype == DType::kI32) {
    return UnimplementedError("tensor '" + name + "' has integer type " + DTypeName(t.dtype));
  }
  if (cols % DTypeBlockSize(t.dtype) != 0) {
    return InvalidArgumentError("tensor '" + name + "' row length " + std::to_string(cols) +
                                " is not a multiple of the " + DTypeName(t.dtype) + " block size");
  }
  RETURN_IF_ERROR(CheckBlockScales(name, t, rows * cols));
  return TensorView{t.data, t.dtype, rows, cols};
}

Status LoadStandardWeights(const WeightSource& src, Model* model) {
  const ModelConfig& c = model->config_;
  ModelWeights& w = model->weights_;
  const int64_t H = c.hidden_size;
  ASSIGN_OR_RETURN(w.token_embedding, LoadMatrix(src, "token_embd.weight", c.vocab_size, H));
  if (c.learned_positions) {
    ASSIGN_OR_RETURN(w.position_embedding,
                     LoadMatrix(src, "position_embd.weight", c.context_length, H));
  }
  const ModelFamily& family = model->family_ ? *model->family_ : FamilyFor(c.arch);
  w.layers.resize(c.num_layers);
  for (int i = 0; i < c.num_layers; ++i) RETURN_IF_ERROR(family.LoadLayer(src, c, i, &w.layers[i]));
  ASSIGN_OR_RETURN(w.output_norm, LoadVector(src, "output_norm.weight", H));
  RETURN_IF_ERROR(LoadOptionalVector(src, "output_norm.bias", H, &w.output_norm_bias));
  if (src.Has("output.weight")) {
    ASSIGN_OR_RETURN(w.output, LoadMatrix(src, "output.weight", c.vocab_size, H));
    model->config_.tied_embeddings = false;
  } else {
    w.output = w.token_embedding;
    model->config_.tied_embeddings = true;
  }
  // Matmul kernels need whole quantization blocks along each row.
  for (const auto& l : w.layers) {
    for (const TensorView* t :
         {&l.wq, &l.wk, &l.wv, &l.wo, &l.wqkv, &l.w_gate, &l.w_up, &l.w_down}) {
      if (!t->empty() && t->cols % DTypeBlockSize(t->dtype) != 0)
        return InvalidArgumentError("matrix row length is not a multiple of its block size");
    }
  }
  return OkStatus();
}

}  // namespace inflight
