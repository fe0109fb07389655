#include "model/weight_utils.h"

#include "base/fp16.h"
#include "kernels/kernels.h"
#include "kernels/quant_blocks.h"

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
  const int64_t H = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn_size;
  ASSIGN_OR_RETURN(w.token_embedding, LoadMatrix(src, "token_embd.weight", c.vocab_size, H));
  if (c.learned_positions) {
    ASSIGN_OR_RETURN(w.position_embedding,
                     LoadMatrix(src, "position_embd.weight", c.context_length, H));
  }
  auto optional_vector = [&](const std::string& name, int64_t n,
                             std::vector<float>* out) -> Status {
    if (!src.Has(name)) return OkStatus();
    ASSIGN_OR_RETURN(*out, LoadVector(src, name, n));
    return OkStatus();
  };
  w.layers.resize(c.num_layers);
  for (int i = 0; i < c.num_layers; ++i) {
    LayerWeights& l = w.layers[i];
    const std::string p = "blk." + std::to_string(i) + ".";
    ASSIGN_OR_RETURN(l.attn_norm, LoadVector(src, p + "attn_norm.weight", H));
    ASSIGN_OR_RETURN(l.ffn_norm, LoadVector(src, p + "ffn_norm.weight", H));
    RETURN_IF_ERROR(optional_vector(p + "attn_norm.bias", H, &l.attn_norm_bias));
    RETURN_IF_ERROR(optional_vector(p + "ffn_norm.bias", H, &l.ffn_norm_bias));
    if (src.Has(p + "attn_qkv.weight")) {
      ASSIGN_OR_RETURN(l.wqkv, LoadMatrix(src, p + "attn_qkv.weight", Q + 2 * KV, H));
      RETURN_IF_ERROR(optional_vector(p + "attn_qkv.bias", Q + 2 * KV, &l.bqkv));
    } else {
      ASSIGN_OR_RETURN(l.wq, LoadMatrix(src, p + "attn_q.weight", Q, H));
      ASSIGN_OR_RETURN(l.wk, LoadMatrix(src, p + "attn_k.weight", KV, H));
      ASSIGN_OR_RETURN(l.wv, LoadMatrix(src, p + "attn_v.weight", KV, H));
      RETURN_IF_ERROR(optional_vector(p + "attn_q.bias", Q, &l.bq));
      RETURN_IF_ERROR(optional_vector(p + "attn_k.bias", KV, &l.bk));
      RETURN_IF_ERROR(optional_vector(p + "attn_v.bias", KV, &l.bv));
    }
    ASSIGN_OR_RETURN(l.wo, LoadMatrix(src, p + "attn_output.weight", H, Q));
    RETURN_IF_ERROR(optional_vector(p + "attn_output.bias", H, &l.bo));
    if (c.arch == Architecture::kQwen3) {
      ASSIGN_OR_RETURN(l.q_norm, LoadVector(src, p + "attn_q_norm.weight", c.head_dim));
      ASSIGN_OR_RETURN(l.k_norm, LoadVector(src, p + "attn_k_norm.weight", c.head_dim));
    }
    if (!c.gelu_ffn) {
      ASSIGN_OR_RETURN(l.w_gate, LoadMatrix(src, p + "ffn_gate.weight", F, H));
    }
    ASSIGN_OR_RETURN(l.w_up, LoadMatrix(src, p + "ffn_up.weight", F, H));
    ASSIGN_OR_RETURN(l.w_down, LoadMatrix(src, p + "ffn_down.weight", H, F));
    RETURN_IF_ERROR(optional_vector(p + "ffn_up.bias", F, &l.b_up));
    RETURN_IF_ERROR(optional_vector(p + "ffn_down.bias", H, &l.b_down));
  }
  ASSIGN_OR_RETURN(w.output_norm, LoadVector(src, "output_norm.weight", H));
  RETURN_IF_ERROR(optional_vector("output_norm.bias", H, &w.output_norm_bias));
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
