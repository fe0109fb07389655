// The scalar reference twin of every kernel: plain loops, no intrinsics.
#include <cmath>
#include <cstdlib>

#include "base/fp16.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

namespace inflight::kernels {
namespace {

void QuantizeRowsQ8Scalar(const float* x, int64_t num_tokens, int64_t cols, QuantizedRows* out) {
  const int64_t nb = cols / kQBlock;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + t * cols + b * kQBlock;
      float amax = 0;
      for (int j = 0; j < kQBlock; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
      const float d = amax / 127.0f;
      const float id = d != 0 ? 1.0f / d : 0.0f;
      int32_t sum = 0;
      for (int j = 0; j < kQBlock; ++j) {
        const int q = static_cast<int>(std::nearbyint(xb[j] * id));
        out->qs[t * cols + b * kQBlock + j] = static_cast<int8_t>(q);
        out->qu[t * cols + b * kQBlock + j] = static_cast<uint8_t>(q + 128);
        sum += q;
      }
      out->d[t * nb + b] = Fp16ToFp32(Fp32ToFp16(d));
      out->sum[t * nb + b] = sum;
    }
  }
}

float DotF32Scalar(const float* a, const float* b, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

float DotF32F16Scalar(const float* a, const uint16_t* b, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * Fp16ToFp32(b[i]);
  return s;
}

float DotF32Bf16Scalar(const float* a, const uint16_t* b, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * Bf16ToFp32(b[i]);
  return s;
}

void AxpyF32Scalar(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void AxpyF16Scalar(float* y, float a, const uint16_t* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * Fp16ToFp32(x[i]);
}

float DotQ8_0Scalar(const BlockQ8_0* w, const QuantizedRows& x, int64_t t, int64_t nb) {
  float s = 0;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t sumi = 0;
    const int8_t* xq = x.qs + t * x.cols + b * kQBlock;
    for (int j = 0; j < kQBlock; ++j) sumi += w[b].qs[j] * xq[j];
    s += static_cast<float>(sumi) * (Fp16ToFp32(w[b].d) * x.d[t * nb + b]);
  }
  return s;
}

float DotQ4_0Scalar(const BlockQ4_0* w, const QuantizedRows& x, int64_t t, int64_t nb) {
  float s = 0;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t sumi = 0;
    const int8_t* xq = x.qs + t * x.cols + b * kQBlock;
    for (int j = 0; j < kQBlock / 2; ++j) {
      sumi += ((w[b].qs[j] & 15) - 8) * xq[j];
      sumi += ((w[b].qs[j] >> 4) - 8) * xq[j + kQBlock / 2];
    }
    s += static_cast<float>(sumi) * (Fp16ToFp32(w[b].d) * x.d[t * nb + b]);
  }
  return s;
}

void MatMulRowsScalar(const TensorView& w, int64_t row_begin, int64_t row_end, const float* x,
                      const QuantizedRows* xq, int64_t num_tokens, float* y, int64_t y_stride) {
  const int64_t cols = w.cols;
  const int64_t nb = cols / kQBlock;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = w.row(r);
    for (int64_t t = 0; t < num_tokens; ++t) {
      float v = 0;
      switch (w.dtype) {
        case DType::kF32: v = DotF32Scalar(x + t * cols, reinterpret_cast<const float*>(row), cols); break;
        case DType::kF16: v = DotF32F16Scalar(x + t * cols, reinterpret_cast<const uint16_t*>(row), cols); break;
        case DType::kBF16: v = DotF32Bf16Scalar(x + t * cols, reinterpret_cast<const uint16_t*>(row), cols); break;
        case DType::kQ8_0: v = DotQ8_0Scalar(reinterpret_cast<const BlockQ8_0*>(row), *xq, t, nb); break;
        case DType::kQ4_0: v = DotQ4_0Scalar(reinterpret_cast<const BlockQ4_0*>(row), *xq, t, nb); break;
        default: std::abort();
      }
      y[t * y_stride + r] = v;
    }
  }
}

}  // namespace

const KernelTable& ScalarKernelTable() {
  static const KernelTable table = {SimdLevel::kScalar, QuantizeRowsQ8Scalar, MatMulRowsScalar,
                                    DotF32Scalar,       DotF32F16Scalar,      AxpyF32Scalar,
                                    AxpyF16Scalar};
  return table;
}

}  // namespace inflight::kernels
