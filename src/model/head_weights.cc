#include "model/head_weights.h"

#include <algorithm>
#include <cstring>

#include "base/fp16.h"
#include "kernels/interleave.h"
#include "kernels/kernels.h"
#include "kernels/quantize.h"
#include "model/model.h"

namespace inflight {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s;
  for (int64_t d : shape) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return "[" + s + "]";
}

}  // namespace

Status HeadWeights::CheckWeightType(const std::string& what, DType weights) {
  if (weights == DType::kQ8_0 || weights == DType::kQ4_0 || weights == DType::kF16 ||
      weights == DType::kBF16 || weights == DType::kF32)
    return OkStatus();
  return InvalidArgumentError(what + ": weights must be kept as stored, q8_0 or q4_0");
}

StatusOr<const SafetensorsTensor*> HeadWeights::Get(const std::string& name,
                                                    const std::vector<int64_t>& shape,
                                                    const std::string& why) const {
  auto it = file_.tensors().find(name);
  if (it == file_.tensors().end())
    return NotFoundError(what_ + ": tensor '" + name + "' is missing");
  const SafetensorsTensor& t = it->second;
  if (t.shape != shape) {
    return InvalidArgumentError(what_ + ": tensor '" + name + "' is " + ShapeText(t.shape) +
                                ", not " + ShapeText(shape) + ": " + why);
  }
  if (!DTypeFromSafetensors(t.dtype))
    return InvalidArgumentError(what_ + ": tensor '" + name + "' has dtype " + t.dtype +
                                " (F32, F16, BF16 supported)");
  return &t;
}

std::vector<float> HeadWeights::ToFloats(const SafetensorsTensor& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  std::vector<float> out(static_cast<size_t>(n));
  const DType dt = *DTypeFromSafetensors(t.dtype);
  for (size_t i = 0; i < out.size(); ++i) {
    if (dt == DType::kF32) {
      std::memcpy(&out[i], t.data + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      out[i] = dt == DType::kBF16 ? Bf16ToFp32(h) : Fp16ToFp32(h);
    }
  }
  return out;
}

TensorView HeadWeights::Matrix(const SafetensorsTensor& t) {
  TensorView v;
  v.data = t.data;
  v.dtype = *DTypeFromSafetensors(t.dtype);
  v.rows = t.shape[0];
  v.cols = t.shape[1];
  const bool quantize = weights_ == DType::kQ8_0 || weights_ == DType::kQ4_0;
  AlignedBuffer q;  // the quantized matrix, kept only when it is not interleaved below
  if (quantize && v.cols % 32 == 0) {
    // Row by row through floats into the quantized type (as the model writer does).
    q.Resize(v.rows * DTypeRowBytes(weights_, v.cols));
    const int64_t row_bytes = static_cast<int64_t>(t.num_bytes) / v.rows;
    for (int64_t r = 0; r < v.rows; ++r) {
      SafetensorsTensor one{t.dtype, {v.cols}, t.data + r * row_bytes, 0};
      const std::vector<float> row = ToFloats(one);
      kernels::QuantizeRow(weights_, row.data(), v.cols,
                           q.as<uint8_t>() + r * DTypeRowBytes(weights_, v.cols));
    }
    v.data = q.data();
    v.dtype = weights_;
  } else if (weights_ == DType::kF32 && v.dtype != DType::kF32) {
    // Exact: the file's values as F32 (a reference run, tests).
    q.Resize(v.rows * v.cols * static_cast<int64_t>(sizeof(float)));
    const std::vector<float> all = ToFloats(t);
    std::memcpy(q.data(), all.data(), all.size() * sizeof(float));
    v.data = q.data();
    v.dtype = DType::kF32;
  }
  if (kernels::CanInterleave(v)) {
    AlignedBuffer copy(kernels::InterleavedBytes(v));
    v = kernels::Interleave(v, copy.as<uint8_t>());
    owned_.push_back(std::move(copy));
  } else if (q.data() != nullptr) {
    owned_.push_back(std::move(q));
  }
  return v;
}

std::vector<float> OutputProjectionFloats(const Model& base, ThreadPool& pool) {
  const int64_t H = base.config().hidden_size, V = base.config().vocab_size;
  std::vector<float> lm(static_cast<size_t>(V * H));
  kernels::MatMulScratch scratch;
  const int64_t step = 256;
  std::vector<float> eye(static_cast<size_t>(step * H)), prod(static_cast<size_t>(step * V));
  for (int64_t i0 = 0; i0 < H; i0 += step) {
    const int64_t n = std::min(step, H - i0);
    std::fill(eye.begin(), eye.end(), 0.0f);
    for (int64_t i = 0; i < n; ++i) eye[i * H + i0 + i] = 1.0f;
    kernels::MatMul(base.weights().output, eye.data(), n, prod.data(), pool, scratch);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t v = 0; v < V; ++v) lm[v * H + i0 + i] = prod[i * V + v];
  }
  return lm;
}

}  // namespace inflight
