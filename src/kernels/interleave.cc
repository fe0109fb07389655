#include "kernels/interleave.h"

#include <cstring>

namespace inflight::kernels {

bool CanInterleave(const TensorView& w) {
  return (w.dtype == DType::kQ8_0 || w.dtype == DType::kQ4_0) && w.cols % kQBlock == 0 && w.rows > 0;
}

int64_t InterleavedBytes(const TensorView& w) {
  TensorView v = w;
  v.dtype = w.dtype == DType::kQ8_0 ? DType::kQ8_0x16 : DType::kQ4_0x16;
  return v.num_bytes();
}

TensorView Interleave(const TensorView& w, uint8_t* dst) {
  const bool q8 = w.dtype == DType::kQ8_0;
  const int64_t nb = w.cols / kQBlock;
  const int64_t groups = (w.rows + kInterleaveRows - 1) / kInterleaveRows;
  const int64_t block_bytes = kInterleaveRows * (q8 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0));
  const int quads = q8 ? 8 : 4;
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* out = dst + (g * nb + b) * block_bytes;
      auto* scales = reinterpret_cast<uint16_t*>(out);
      uint8_t* data = out + kInterleaveRows * 2;
      for (int j = 0; j < kInterleaveRows; ++j) {
        const int64_t r = g * kInterleaveRows + j;
        uint16_t d = 0;
        uint8_t bytes[kQBlock];
        if (r < w.rows && q8) {
          const auto* blk = reinterpret_cast<const BlockQ8_0*>(w.row(r)) + b;
          d = blk->d;
          for (int i = 0; i < kQBlock; ++i) bytes[i] = static_cast<uint8_t>(blk->qs[i] + 128);
        } else if (r < w.rows) {
          const auto* blk = reinterpret_cast<const BlockQ4_0*>(w.row(r)) + b;
          d = blk->d;
          std::memcpy(bytes, blk->qs, kQBlock / 2);
        } else {
          // Padding rows: scale 0 and the encoding of zero (128, or nibbles 8|8).
          std::memset(bytes, q8 ? 128 : 0x88, sizeof bytes);
        }
        scales[j] = d;
        for (int q = 0; q < quads; ++q) std::memcpy(data + (q * kInterleaveRows + j) * 4, bytes + 4 * q, 4);
      }
    }
  }
  TensorView v = w;
  v.data = dst;
  v.dtype = q8 ? DType::kQ8_0x16 : DType::kQ4_0x16;
  return v;
}

}  // namespace inflight::kernels
