#include "kernels/interleave.h"

#include <cmath>
#include <cstring>

#include "base/fp16.h"
#include "kernels/kernels_internal.h"
#include "kernels/packed_layout.h"
#include "kernels/quant_blocks.h"

namespace inflight::kernels {
namespace {

DType InterleavedType(DType t) {
  if (t == DType::kQ8_0) return DType::kQ8_0x16;
  if (t == DType::kQ4_0) return DType::kQ4_0x16;
  if (t == DType::kF16 || t == DType::kBF16) return DType::kI16x16;
  const PackedLayout* l = FindPackedLayout(t);
  return l ? l->packed : t;
}

TensorView InterleaveQ8Q4(const TensorView& w, uint8_t* dst) {
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
        for (int q = 0; q < quads; ++q)
          std::memcpy(data + (q * kInterleaveRows + j) * 4, bytes + 4 * q, 4);
      }
    }
  }
  TensorView v = w;
  v.data = dst;
  v.dtype = q8 ? DType::kQ8_0x16 : DType::kQ4_0x16;
  return v;
}

// F16 / BF16: 16-row groups of int16 blocks (kernels_internal.h says why): per row and block,
// s = amax / 5791 and q = round(w / s), the error at most s / 2. Padding rows are zero.
TensorView I16Blocks(const TensorView& w, uint8_t* dst) {
  const int64_t groups = (w.rows + kInterleaveRows - 1) / kInterleaveRows, nb = w.cols / kI16Block;
  std::memset(dst, 0, groups * nb * kI16RecordBytes);
  const bool f16 = w.dtype == DType::kF16;
  float v[kI16Block];
  for (int64_t r = 0; r < w.rows; ++r) {
    const auto* src = reinterpret_cast<const uint16_t*>(w.row(r));
    const int lane = static_cast<int>(r % kInterleaveRows);
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* rec = dst + (r / kInterleaveRows * nb + b) * kI16RecordBytes;
      float amax = 0.0f;
      bool finite = true;
      for (int c = 0; c < kI16Block; ++c) {
        const uint16_t h = src[b * kI16Block + c];
        v[c] = f16 ? Fp16ToFp32(h) : Bf16ToFp32(h);
        amax = std::fmax(amax, std::fabs(v[c]));
        finite = finite && std::isfinite(v[c]);
      }
      const float s = I16Scale(amax, finite), inv = I16Inverse(s);
      std::memcpy(rec + 4 * lane, &s, 4);
      for (int c = 0; c < kI16Block; ++c) {
        const int16_t q = finite ? I16Round(v[c] * inv) : int16_t{0};
        std::memcpy(rec + I16WeightOffset(lane, c), &q, 2);
      }
    }
  }
  TensorView out = w;
  out.data = dst;
  out.dtype = DType::kI16x16;
  return out;
}

// One row's header fields of a record (kernels/packed_layout.h).
void WriteHeader(const PackedLayout& l, const UnpackedBlock& b, int lane, uint8_t* h) {
  auto put16 = [&](int at, uint16_t v) { std::memcpy(h + at + 2 * lane, &v, 2); };
  if (l.header != PackedHeader::kE8) put16(0, b.d);
  switch (l.header) {
    case PackedHeader::kD:
      break;
    case PackedHeader::kDM:
      put16(32, b.dmin);
      break;
    case PackedHeader::kK4:
      put16(32, b.dmin);
      for (int j = 0; j < 8; ++j) {
        h[64 + 16 * j + lane] = static_cast<uint8_t>(b.sc[j]);
        h[192 + 16 * j + lane] = b.m[j];
      }
      break;
    case PackedHeader::kK6:
      for (int j = 0; j < 16; ++j) h[32 + 16 * j + lane] = static_cast<uint8_t>(b.sc[j]);
      break;
    case PackedHeader::kK2:
      put16(32, b.dmin);
      for (int j = 0; j < 16; ++j)
        h[64 + 16 * j + lane] = static_cast<uint8_t>((b.sc[j] & 15) | (b.m[j] << 4));
      break;
    case PackedHeader::kXS:
      for (int j = 0; j < 8; ++j) h[32 + 16 * j + lane] = static_cast<uint8_t>(b.sc[j]);
      break;
    case PackedHeader::kE8:
      h[lane] = b.e;
      break;
  }
}

// One row's 32 stored quants into a block payload's planes.
void WritePayload(const PackedLayout& l, const uint8_t* q, int lane, uint8_t* payload) {
  for (int c = 0; c < kQBlock; ++c) {
    const int p = c / 4, k = 4 * lane + c % 4;
    const int u = q[c];
    if (l.nib_at >= 0)
      payload[l.nib_at + 64 * (p % 4) + k] |= static_cast<uint8_t>((u & 15) << (4 * (p / 4)));
    if (l.crumb_at >= 0) {
      payload[l.crumb_at + 64 * (p / 4) + k] |=
          static_cast<uint8_t>(((u >> l.crumb_shift) & 3) << (2 * (p % 4)));
    }
    if (l.bit_at >= 0)
      payload[l.bit_at + 8 * p + k / 8] |=
          static_cast<uint8_t>(((u >> l.bit_shift) & 1) << (k % 8));
  }
}

TensorView InterleaveBlockFormat(const PackedLayout& l, const TensorView& w, uint8_t* dst) {
  const int64_t sb_cols = int64_t{kQBlock} * l.blocks_per_record;
  const int64_t nsb = w.cols / sb_cols;
  const int64_t groups = (w.rows + kInterleaveRows - 1) / kInterleaveRows;
  const int64_t src_bytes = DTypeBlockBytes(l.source);
  std::memset(dst, 0, groups * nsb * l.record_bytes());
  UnpackedBlock b;
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t sb = 0; sb < nsb; ++sb) {
      uint8_t* rec = dst + (g * nsb + sb) * l.record_bytes();
      for (int lane = 0; lane < kInterleaveRows; ++lane) {
        const int64_t r = g * kInterleaveRows + lane;
        // Padding rows: all zero (scale 0; MXFP4: exponent 0 and quants of value 0).
        if (r >= w.rows) continue;
        UnpackBlock(l.source, w.row(r) + sb * src_bytes, &b);
        WriteHeader(l, b, lane, rec);
        for (int blk = 0; blk < l.blocks_per_record; ++blk) {
          WritePayload(l, b.q + kQBlock * blk, lane, rec + l.header_bytes + blk * l.block_bytes);
        }
      }
    }
  }
  TensorView v = w;
  v.data = dst;
  v.dtype = l.packed;
  return v;
}

}  // namespace

int PackedQuant(const PackedLayout& l, const uint8_t* payload, int lane, int col) {
  const int p = col / 4, k = 4 * lane + col % 4;
  int u = 0;
  if (l.nib_at >= 0) u |= (payload[l.nib_at + 64 * (p % 4) + k] >> (4 * (p / 4))) & 15;
  if (l.crumb_at >= 0)
    u |= ((payload[l.crumb_at + 64 * (p / 4) + k] >> (2 * (p % 4))) & 3) << l.crumb_shift;
  if (l.bit_at >= 0) u |= ((payload[l.bit_at + 8 * p + k / 8] >> (k % 8)) & 1) << l.bit_shift;
  return l.lut != nullptr ? l.lut[u] : u;
}

void PackedScales(const PackedLayout& l, const uint8_t* h, int block, int sub, int lane, float* s,
                  float* o) {
  auto half = [&](int at) {
    uint16_t v;
    std::memcpy(&v, h + at + 2 * lane, 2);
    return Fp16ToFp32(v);
  };
  const int sub16 = 2 * block + sub;
  *o = 0.0f;
  if (l.header == PackedHeader::kE8) {
    *s = E8M0ToFp32Half(h[lane]);
    return;
  }
  const float d = half(0);
  switch (l.header) {
    case PackedHeader::kD:
      *s = d;
      break;
    case PackedHeader::kDM:
      *s = d, *o = -half(32);
      break;
    case PackedHeader::kK4:
      *s = d * static_cast<float>(h[64 + 16 * block + lane]);
      *o = half(32) * static_cast<float>(h[192 + 16 * block + lane]);
      break;
    case PackedHeader::kK6:
      *s = d * static_cast<float>(static_cast<int8_t>(h[32 + 16 * sub16 + lane]));
      break;
    case PackedHeader::kK2: {
      const uint8_t v = h[64 + 16 * sub16 + lane];
      *s = d * static_cast<float>(v & 15);
      *o = half(32) * static_cast<float>(v >> 4);
      break;
    }
    case PackedHeader::kXS:
      *s = d * static_cast<float>(static_cast<int8_t>(h[32 + 16 * block + lane]));
      break;
    case PackedHeader::kE8:
      break;  // above
  }
}

bool CanInterleave(const TensorView& w) {
  if (w.rows <= 0) return false;
  // F16 / BF16 rows of other lengths keep their layout (the FP32 FMA kernel).
  if (w.dtype == DType::kF16 || w.dtype == DType::kBF16) return w.cols % kI16Block == 0;
  if (w.dtype == DType::kQ8_0 || w.dtype == DType::kQ4_0) return w.cols % kQBlock == 0;
  const PackedLayout* l = FindPackedLayout(w.dtype);
  return l && l->source == w.dtype && w.cols % DTypeBlockSize(w.dtype) == 0;
}

int64_t InterleavedBytes(const TensorView& w) {
  TensorView v = w;
  v.dtype = InterleavedType(w.dtype);
  return v.num_bytes();
}

TensorView Interleave(const TensorView& w, uint8_t* dst) {
  if (w.dtype == DType::kQ8_0 || w.dtype == DType::kQ4_0) return InterleaveQ8Q4(w, dst);
  if (w.dtype == DType::kF16 || w.dtype == DType::kBF16) return I16Blocks(w, dst);
  return InterleaveBlockFormat(*FindPackedLayout(w.dtype), w, dst);
}

}  // namespace inflight::kernels
