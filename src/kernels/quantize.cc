#include "kernels/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/fp16.h"
#include "kernels/quant_blocks.h"

namespace inflight::kernels {

void QuantizeRow(DType dtype, const float* x, int64_t n, uint8_t* out) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(out, x, n * 4);
      return;
    case DType::kF16: {
      auto* h = reinterpret_cast<uint16_t*>(out);
      for (int64_t i = 0; i < n; ++i) h[i] = Fp32ToFp16(x[i]);
      return;
    }
    case DType::kBF16: {
      auto* h = reinterpret_cast<uint16_t*>(out);
      for (int64_t i = 0; i < n; ++i) h[i] = Fp32ToBf16(x[i]);
      return;
    }
    case DType::kQ8_0: {
      auto* b = reinterpret_cast<BlockQ8_0*>(out);
      for (int64_t i = 0; i < n / kQBlock; ++i) {
        const float* xb = x + i * kQBlock;
        float amax = 0;
        for (int j = 0; j < kQBlock; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
        const float d = amax / 127.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        b[i].d = Fp32ToFp16(d);
        for (int j = 0; j < kQBlock; ++j) b[i].qs[j] = static_cast<int8_t>(std::roundf(xb[j] * id));
      }
      return;
    }
    case DType::kQ4_0: {
      auto* b = reinterpret_cast<BlockQ4_0*>(out);
      for (int64_t i = 0; i < n / kQBlock; ++i) {
        const float* xb = x + i * kQBlock;
        float amax = 0, max = 0;  // max keeps the sign of the largest magnitude
        for (int j = 0; j < kQBlock; ++j) {
          if (std::fabs(xb[j]) > amax) {
            amax = std::fabs(xb[j]);
            max = xb[j];
          }
        }
        const float d = max / -8.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        b[i].d = Fp32ToFp16(d);
        for (int j = 0; j < kQBlock / 2; ++j) {
          const int q0 = std::min(15, static_cast<int>(xb[j] * id + 8.5f));
          const int q1 = std::min(15, static_cast<int>(xb[j + kQBlock / 2] * id + 8.5f));
          b[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
      }
      return;
    }
    default: {
      INFLIGHT_CHECK(IsBlockFormat(dtype));
      const int64_t bs = DTypeBlockSize(dtype), bb = DTypeBlockBytes(dtype);
      for (int64_t i = 0; i < n / bs; ++i) QuantizeBlock(dtype, x + i * bs, out + i * bb);
      return;
    }
  }
}

}  // namespace inflight::kernels
