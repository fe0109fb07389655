#include "model/head_weights.h"

#include <cstring>

#include "base/fp16.h"
#include "kernels/interleave.h"
#include "kernels/quantize.h"

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

}  // namespace inflight
