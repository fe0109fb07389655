// The scalar reference twin of every kernel: plain loops, no intrinsics.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "base/fp16.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "kernels/packed_layout.h"

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
      int32_t half_sums[2] = {0, 0};
      for (int j = 0; j < kQBlock; ++j) {
        const int q = static_cast<int>(std::nearbyint(xb[j] * id));
        out->qs[t * cols + b * kQBlock + j] = static_cast<int8_t>(q);
        out->qu[t * cols + b * kQBlock + j] = static_cast<uint8_t>(q + 128);
        half_sums[j / 16] += q;
      }
      out->d[t * nb + b] = Fp16ToFp32(Fp32ToFp16(d));
      out->sum[t * nb + b] = half_sums[0] + half_sums[1];
      out->sum16[2 * (t * nb + b)] = half_sums[0];
      out->sum16[2 * (t * nb + b) + 1] = half_sums[1];
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

// Interleaved Q8_0 / Q4_0 (kernels/interleave.h): per row and token, in block order,
// acc = fma(float(int dot - correction), dw * dx, acc). The AVX-512 kernel does exactly these
// float operations, so the two agree bit for bit.
void MatMulInterleavedScalar(const TensorView& w, int64_t row_begin, int64_t row_end,
                             const QuantizedRows& x, int64_t num_tokens, float* y,
                             int64_t y_stride) {
  const bool q8 = w.dtype == DType::kQ8_0x16;
  const int64_t cols = w.cols, nb = cols / kQBlock;
  const int64_t block_bytes = kInterleaveRows * (q8 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0));
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t g = r / kInterleaveRows, j = r % kInterleaveRows;
    for (int64_t t = 0; t < num_tokens; ++t) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = base + (g * nb + b) * block_bytes;
        uint16_t d16;
        std::memcpy(&d16, blk + 2 * j, 2);
        const uint8_t* data = blk + 2 * kInterleaveRows;
        const int8_t* xs = x.qs + t * cols + b * kQBlock;
        int32_t dot = 0;
        for (int q = 0; q < (q8 ? 8 : 4); ++q) {
          const uint8_t* wb = data + (q * kInterleaveRows + j) * 4;
          for (int i = 0; i < 4; ++i) {
            if (q8) {
              dot += wb[i] * xs[4 * q + i];
            } else {
              dot += (wb[i] & 15) * xs[4 * q + i] + (wb[i] >> 4) * xs[16 + 4 * q + i];
            }
          }
        }
        const int32_t corr = (q8 ? 128 : 8) * x.sum[t * nb + b];
        acc = std::fma(static_cast<float>(dot - corr), Fp16ToFp32(d16) * x.d[t * nb + b], acc);
      }
      y[t * y_stride + r] = acc;
    }
  }
}

// The block formats' interleaved records (kernels/packed_layout.h): per row and token, in
// block order, the integer dot of each sub-block (minus the zero point times the activations'
// sum) scaled in float, the mins subtracted, then acc = fma(v, dx, acc). The AVX-512 kernel
// does exactly these float operations in this order, so the two agree bit for bit.
void MatMulPackedScalar(const PackedLayout& l, const TensorView& w, int64_t row_begin,
                        int64_t row_end, const QuantizedRows& x, int64_t num_tokens, float* y,
                        int64_t y_stride) {
  const int64_t cols = w.cols, nb = cols / kQBlock, nsb = nb / l.blocks_per_record;
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int lane = static_cast<int>(r % kInterleaveRows);
    const uint8_t* group = base + r / kInterleaveRows * nsb * l.record_bytes();
    for (int64_t t = 0; t < num_tokens; ++t) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* rec = group + b / l.blocks_per_record * l.record_bytes();
        const int blk = static_cast<int>(b % l.blocks_per_record);
        const uint8_t* payload = rec + l.header_bytes + blk * l.block_bytes;
        const int8_t* xs = x.qs + t * cols + b * kQBlock;
        int32_t dots[2] = {0, 0};
        for (int c = 0; c < kQBlock; ++c) dots[c / 16] += PackedQuant(l, payload, lane, c) * xs[c];
        const int32_t* sum16 = x.sum16 + 2 * (t * nb + b);
        float v;
        if (l.sub16) {
          float s0, o0, s1, o1;
          PackedScales(l, rec, blk, 0, lane, &s0, &o0);
          PackedScales(l, rec, blk, 1, lane, &s1, &o1);
          v = static_cast<float>(dots[0] - l.offset * sum16[0]) * s0;
          v = std::fma(static_cast<float>(dots[1] - l.offset * sum16[1]), s1, v);
          if (l.has_min) {
            v = std::fma(-o0, static_cast<float>(sum16[0]), v);
            v = std::fma(-o1, static_cast<float>(sum16[1]), v);
          }
        } else {
          float s, o;
          PackedScales(l, rec, blk, 0, lane, &s, &o);
          const int32_t sum = x.sum[t * nb + b];
          v = static_cast<float>(dots[0] + dots[1] - l.offset * sum) * s;
          if (l.has_min) v = std::fma(-o, static_cast<float>(sum), v);
        }
        acc = std::fma(v, x.d[t * nb + b], acc);
      }
      y[t * y_stride + r] = acc;
    }
  }
}

void QuantizeRowsI16Scalar(const float* x, int64_t num_tokens, int64_t cols, int16_t* q, float* d) {
  const int64_t nb = cols / kI16Block;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + t * cols + b * kI16Block;
      float amax = 0.0f;
      bool finite = true;
      for (int c = 0; c < kI16Block; ++c) {
        amax = std::fmax(amax, std::fabs(xb[c]));
        finite = finite && std::isfinite(xb[c]);
      }
      const float scale = I16Scale(amax, finite), inv = I16Inverse(scale);
      // A non-finite block's quants are 0 (its NaN scale carries it).
      for (int c = 0; c < kI16Block; ++c)
        q[t * cols + b * kI16Block + c] = finite ? I16Round(xb[c] * inv) : int16_t{0};
      d[t * nb + b] = scale;
    }
  }
}

// int16 blocks: per row and token, acc = fma(float(block's int32 dot), s * d, acc) over the
// blocks in order from 0 (the int32 dot wraps like vpdpwssd, exact within the bound), the
// AVX-512 kernel's sequence for each lane, so the two agree bit for bit.
void MatMulI16Scalar(const TensorView& w, int64_t row_begin, int64_t row_end, const float* x,
                     const QuantizedRows* xq, int64_t num_tokens, float* y, int64_t y_stride) {
  const int64_t cols = w.cols, nb = cols / kI16Block;
  std::vector<int16_t> own_q;
  std::vector<float> own_d;
  const int16_t* q = xq != nullptr ? xq->q16 : nullptr;
  const float* d = xq != nullptr ? xq->d16 : nullptr;
  if (q == nullptr) {
    own_q.resize(num_tokens * cols), own_d.resize(num_tokens * nb);
    QuantizeRowsI16Scalar(x, num_tokens, cols, own_q.data(), own_d.data());
    q = own_q.data(), d = own_d.data();
  }
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int lane = static_cast<int>(r % kInterleaveRows);
    const uint8_t* group =
        static_cast<const uint8_t*>(w.data) + r / kInterleaveRows * nb * kI16RecordBytes;
    for (int64_t t = 0; t < num_tokens; ++t) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* rec = group + b * kI16RecordBytes;
        uint32_t sum = 0;  // wrapping, as the instruction
        for (int c = 0; c < kI16Block; ++c) {
          int16_t wq;
          std::memcpy(&wq, rec + I16WeightOffset(lane, c), 2);
          sum += static_cast<uint32_t>(static_cast<int32_t>(wq) * q[t * cols + b * kI16Block + c]);
        }
        float s;
        std::memcpy(&s, rec + 4 * lane, 4);
        acc = std::fma(static_cast<float>(static_cast<int32_t>(sum)), s * d[t * nb + b], acc);
      }
      y[t * y_stride + r] = acc;
    }
  }
}

void MatMulRowsScalar(const TensorView& w, int64_t row_begin, int64_t row_end, const float* x,
                      const QuantizedRows* xq, int64_t num_tokens, float* y, int64_t y_stride) {
  if (w.dtype == DType::kI16x16) {
    return MatMulI16Scalar(w, row_begin, row_end, x, xq, num_tokens, y, y_stride);
  }
  if (const PackedLayout* l = FindPackedLayout(w.dtype); l && l->packed == w.dtype) {
    return MatMulPackedScalar(*l, w, row_begin, row_end, *xq, num_tokens, y, y_stride);
  }
  if (w.interleaved())
    return MatMulInterleavedScalar(w, row_begin, row_end, *xq, num_tokens, y, y_stride);
  const int64_t cols = w.cols;
  const int64_t nb = cols / kQBlock;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = w.row(r);
    for (int64_t t = 0; t < num_tokens; ++t) {
      float v = 0;
      switch (w.dtype) {
        case DType::kF32:
          v = DotF32Scalar(x + t * cols, reinterpret_cast<const float*>(row), cols);
          break;
        case DType::kF16:
          v = DotF32F16Scalar(x + t * cols, reinterpret_cast<const uint16_t*>(row), cols);
          break;
        case DType::kBF16:
          v = DotF32Bf16Scalar(x + t * cols, reinterpret_cast<const uint16_t*>(row), cols);
          break;
        case DType::kQ8_0:
          v = DotQ8_0Scalar(reinterpret_cast<const BlockQ8_0*>(row), *xq, t, nb);
          break;
        case DType::kQ4_0:
          v = DotQ4_0Scalar(reinterpret_cast<const BlockQ4_0*>(row), *xq, t, nb);
          break;
        default:
          std::abort();
      }
      y[t * y_stride + r] = v;
    }
  }
}

float SumExpScalar(const float* x, int64_t n, float mx) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i] - mx));
  return static_cast<float>(sum);
}

// 8-bit K/V (attention.h), the integer model the AVX-512 kernel follows: each row's query as
// 8 bits with one scale, q . k from the biased unsigned K (minus 128 * sum(q)) times both
// scales; span by span (128 absolute positions, as the AVX-512 kernel's online softmax goes),
// each row's p * (V's scale) as 8 unsigned bits against the span's largest, p . V summed in
// integers and scaled once.
void AttendRowsI8Scalar(const KvLayerView& kv, const AttendRowsArgs& args, float* scratch) {
  const int32_t tpb = kv.tokens_per_block, hd = kv.head_dim, num_rows = args.num_rows,
                span = AttentionSpanPositions(tpb);
  const int64_t tile_values = static_cast<int64_t>(tpb) * hd;
  float* probs = scratch;     // [span]
  float* acc = probs + span;  // [hd]
  std::vector<int8_t> q8(hd);
  std::vector<int32_t> sums(hd);
  auto tile_of = [&](int32_t pos) {
    return kv.TileByteOffset(args.block_table[pos / tpb], args.kv_head);
  };
  auto scale_at = [&](const void* base, int32_t pos) {
    uint16_t bits;
    std::memcpy(
        &bits, static_cast<const uint8_t*>(base) + tile_of(pos) + tile_values + 2 * (pos % tpb), 2);
    return Fp16ToFp32(bits);
  };
  for (int32_t r = 0; r < num_rows; ++r) {
    const float* q = args.q[r];
    float qa = 0.0f;
    for (int32_t i = 0; i < hd; ++i) qa = std::fmax(qa, std::fabs(q[i]));
    const float qinv = qa > 0.0f ? 127.0f / qa : 0.0f, qsc = qa / 127.0f * args.scale;
    int32_t sumq = 0;
    for (int32_t i = 0; i < hd; ++i) {
      q8[i] = static_cast<int8_t>(std::clamp(std::nearbyint(q[i] * qinv), -127.0f, 127.0f));
      sumq += q8[i];
    }
    float mx = args.sinks != nullptr ? args.sinks[r] : -INFINITY;
    float sum = args.sinks != nullptr ? 1.0f : 0.0f;
    std::fill(acc, acc + hd, 0.0f);
    const int32_t first = args.FirstSeen(r), len = args.len[r];
    for (int32_t p0 = first / span * span; p0 < len; p0 += span) {
      const int32_t lo = std::max(first, p0), hi = std::min(len, p0 + span);
      float span_max = -INFINITY;
      for (int32_t j = lo; j < hi; ++j) {
        const auto* kt = static_cast<const uint8_t*>(kv.k) + tile_of(j);
        int32_t dot = 0;
        for (int32_t i = 0; i < hd; ++i)
          dot += q8[i] * kt[(static_cast<int64_t>(i / 4) * tpb + j % tpb) * 4 + i % 4];
        float s = static_cast<float>(dot - 128 * sumq) * qsc * scale_at(kv.k, j);
        if (args.softcap > 0.0f) s = args.softcap * std::tanh(s / args.softcap);
        if (args.Hidden(r, j)) s = -INFINITY;
        probs[j - p0] = s;
        span_max = std::fmax(span_max, s);
      }
      const float new_max = std::fmax(mx, span_max);
      if (new_max == -INFINITY) continue;  // every position hidden so far (tree attention)
      const float alpha = std::exp(mx - new_max);
      float span_sum = 0.0f, pmax = 0.0f;
      for (int32_t j = lo; j < hi; ++j) {
        float& p = probs[j - p0];
        p = std::exp(p - new_max);
        span_sum += p;
        p *= scale_at(kv.v, j);
        pmax = std::fmax(pmax, p);
      }
      sum = sum * alpha + span_sum;
      mx = new_max;
      const float pinv = pmax > 0.0f ? 255.0f / pmax : 0.0f, ps = pmax / 255.0f;
      std::fill(sums.begin(), sums.end(), 0);
      for (int32_t j = lo; j < hi; ++j) {
        const auto* vt = static_cast<const int8_t*>(kv.v) + tile_of(j);
        const int32_t p8 =
            static_cast<int32_t>(std::fmin(std::nearbyint(probs[j - p0] * pinv), 255.0f));
        for (int32_t i = 0; i < hd; ++i)
          sums[i] += p8 * vt[(static_cast<int64_t>(j % tpb / 4) * hd + i) * 4 + j % 4];
      }
      for (int32_t i = 0; i < hd; ++i)
        acc[i] = std::fma(static_cast<float>(sums[i]), ps, acc[i] * alpha);
    }
    const float inv = 1.0f / sum;
    for (int32_t i = 0; i < hd; ++i) args.out[r][i] = acc[i] * inv;
  }
}

// Block by block with an online softmax, as the SIMD kernels do: per block the rows' scores,
// then each row's running max / sum update and its rescaled output plus the block's p . V.
// The walk starts at the first block a row sees. A sink starts its row's running max and sum
// (a logit whose value is zero), so it joins the softmax like any position.
void AttendRowsScalar(const KvLayerView& kv, const AttendRowsArgs& args, float* scratch) {
  if (kv.dtype == DType::kI8) return AttendRowsI8Scalar(kv, args, scratch);
  const int32_t tpb = kv.tokens_per_block, hd = kv.head_dim, num_rows = args.num_rows;
  const int32_t* len = args.len;
  const float* const* q = args.q;
  const float scale = args.scale, softcap = args.softcap;
  auto load = [&](const void* base, int64_t i) {
    switch (kv.dtype) {
      case DType::kF32:
        return static_cast<const float*>(base)[i];
      case DType::kF16:
        return Fp16ToFp32(static_cast<const uint16_t*>(base)[i]);
      default:
        return Bf16ToFp32(static_cast<const uint16_t*>(base)[i]);
    }
  };
  float* probs = scratch;                                     // [rows][tpb]
  float* acc = probs + static_cast<int64_t>(num_rows) * tpb;  // [rows][hd]
  int32_t n = 0, first = std::numeric_limits<int32_t>::max();
  for (int32_t r = 0; r < num_rows; ++r)
    n = std::max(n, len[r]), first = std::min(first, args.FirstSeen(r));
  float* mx = acc + static_cast<int64_t>(num_rows) * hd;
  float* sum = mx + num_rows;
  for (int32_t r = 0; r < num_rows; ++r) {
    mx[r] = args.sinks != nullptr ? args.sinks[r] : -INFINITY;
    sum[r] = args.sinks != nullptr ? 1.0f : 0.0f;
  }
  std::fill(acc, acc + static_cast<int64_t>(num_rows) * hd, 0.0f);
  for (int32_t b = first / tpb, p0 = b * tpb; p0 < n; ++b, p0 += tpb) {
    const int64_t tile = kv.TileOffset(args.block_table[b], args.kv_head);
    for (int32_t r = 0; r < num_rows; ++r) {
      const int32_t lo = std::max(0, args.FirstSeen(r) - p0), valid = std::min(tpb, len[r] - p0);
      if (valid <= lo) continue;
      float* p = probs + static_cast<int64_t>(r) * tpb;
      float block_max = -INFINITY;
      for (int32_t j = lo; j < valid; ++j) {
        float s = 0;
        for (int32_t i = 0; i < hd; ++i)
          s += q[r][i] * load(kv.k, tile + static_cast<int64_t>(i) * tpb + j);
        p[j] = s * scale;
        if (softcap > 0.0f) p[j] = softcap * std::tanh(p[j] / softcap);
        if (args.Hidden(r, p0 + j)) p[j] = -INFINITY;
        block_max = std::fmax(block_max, p[j]);
      }
      const float new_max = std::fmax(mx[r], block_max);
      if (new_max == -INFINITY) continue;  // every position hidden so far (tree attention)
      const float alpha = std::exp(mx[r] - new_max);
      float block_sum = 0;
      for (int32_t j = lo; j < valid; ++j) {
        p[j] = std::exp(p[j] - new_max);
        block_sum += p[j];
      }
      sum[r] = sum[r] * alpha + block_sum;
      mx[r] = new_max;
      float* a = acc + static_cast<int64_t>(r) * hd;
      for (int32_t i = 0; i < hd; ++i) a[i] *= alpha;
      for (int32_t j = lo; j < valid; ++j) {
        for (int32_t i = 0; i < hd; ++i)
          a[i] += p[j] * load(kv.v, tile + static_cast<int64_t>(j) * hd + i);
      }
    }
  }
  for (int32_t r = 0; r < num_rows; ++r) {
    const float inv = 1.0f / sum[r];
    for (int32_t i = 0; i < hd; ++i) args.out[r][i] = acc[static_cast<int64_t>(r) * hd + i] * inv;
  }
}

void SiluMulScalar(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void F32ToF16Scalar(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Fp32ToFp16(x[i]);
}

int64_t ArgMaxScalar(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

}  // namespace

const KernelTable& ScalarKernelTable() {
  static const KernelTable table = {SimdLevel::kScalar, QuantizeRowsQ8Scalar, MatMulRowsScalar,
                                    DotF32Scalar,       DotF32F16Scalar,      AxpyF32Scalar,
                                    AxpyF16Scalar,      SumExpScalar,         AttendRowsScalar,
                                    SiluMulScalar,      F32ToF16Scalar,       QuantizeRowsI16Scalar,
                                    ArgMaxScalar};
  return table;
}

}  // namespace inflight::kernels
