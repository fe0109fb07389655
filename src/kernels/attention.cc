#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/fp16.h"
#include "base/thread_pool.h"
#include "kernels/kernels.h"

namespace inflight::kernels {
namespace {

inline int64_t SlotOf(const KvLayerView& kv, const int32_t* table, int32_t pos) {
  return static_cast<int64_t>(table[pos / kv.tokens_per_block]) * kv.tokens_per_block +
         pos % kv.tokens_per_block;
}

void StoreRow(DType dtype, void* base, int64_t slot, int32_t kv_dim, const float* src) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(static_cast<float*>(base) + slot * kv_dim, src, kv_dim * sizeof(float));
      break;
    case DType::kF16: {
      uint16_t* dst = static_cast<uint16_t*>(base) + slot * kv_dim;
      for (int32_t i = 0; i < kv_dim; ++i) dst[i] = Fp32ToFp16(src[i]);
      break;
    }
    case DType::kBF16: {
      uint16_t* dst = static_cast<uint16_t*>(base) + slot * kv_dim;
      for (int32_t i = 0; i < kv_dim; ++i) dst[i] = Fp32ToBf16(src[i]);
      break;
    }
    default: INFLIGHT_CHECK(false);
  }
}

// One query head of one token against positions 0..pos.
void AttendOne(const KernelTable& k, const KvLayerView& kv, const AttentionShape& shape,
               const int32_t* table, int32_t pos, int32_t head, const float* q, float* out,
               float* scores) {
  const int32_t group = shape.num_heads / shape.num_kv_heads;
  const int64_t head_off = static_cast<int64_t>(head / group) * shape.head_dim;
  const int32_t hd = shape.head_dim;
  const int32_t n = pos + 1;
  for (int32_t j = 0; j < n; ++j) {
    const int64_t row = SlotOf(kv, table, j) * kv.kv_dim + head_off;
    float s;
    if (kv.dtype == DType::kF32) {
      s = k.dot_f32(q, static_cast<const float*>(kv.k) + row, hd);
    } else if (kv.dtype == DType::kF16) {
      s = k.dot_f32_f16(q, static_cast<const uint16_t*>(kv.k) + row, hd);
    } else {
      const uint16_t* kr = static_cast<const uint16_t*>(kv.k) + row;
      s = 0;
      for (int32_t i = 0; i < hd; ++i) s += q[i] * Bf16ToFp32(kr[i]);
    }
    scores[j] = s * shape.scale;
  }
  float mx = -INFINITY;
  for (int32_t j = 0; j < n; ++j) mx = std::max(mx, scores[j]);
  float sum = 0;
  for (int32_t j = 0; j < n; ++j) {
    scores[j] = std::exp(scores[j] - mx);
    sum += scores[j];
  }
  const float inv = 1.0f / sum;
  std::memset(out, 0, hd * sizeof(float));
  for (int32_t j = 0; j < n; ++j) {
    const int64_t row = SlotOf(kv, table, j) * kv.kv_dim + head_off;
    const float p = scores[j] * inv;
    if (kv.dtype == DType::kF32) {
      k.axpy_f32(out, p, static_cast<const float*>(kv.v) + row, hd);
    } else if (kv.dtype == DType::kF16) {
      k.axpy_f16(out, p, static_cast<const uint16_t*>(kv.v) + row, hd);
    } else {
      const uint16_t* vr = static_cast<const uint16_t*>(kv.v) + row;
      for (int32_t i = 0; i < hd; ++i) out[i] += p * Bf16ToFp32(vr[i]);
    }
  }
}

}  // namespace

void WriteKv(const KvLayerView& kv, const AttentionSeq& seq, const float* k, const float* v) {
  for (int32_t t = 0; t < seq.num_tokens; ++t) {
    const int64_t slot = SlotOf(kv, seq.block_table, seq.start_pos + t);
    StoreRow(kv.dtype, kv.k, slot, kv.kv_dim, k + static_cast<int64_t>(t) * kv.kv_dim);
    StoreRow(kv.dtype, kv.v, slot, kv.kv_dim, v + static_cast<int64_t>(t) * kv.kv_dim);
  }
}

void PagedAttention(const KvLayerView& kv, const AttentionShape& shape, const AttentionSeq* seqs,
                    int num_seqs, const float* q, float* out, ThreadPool& pool, float* scratch,
                    int64_t max_positions) {
  const KernelTable& k = ActiveKernels();
  // Work item = (token row, head); items are numbered sequence by sequence.
  std::vector<int64_t> first_item(num_seqs + 1, 0);
  for (int s = 0; s < num_seqs; ++s) {
    first_item[s + 1] = first_item[s] + static_cast<int64_t>(seqs[s].num_tokens) * shape.num_heads;
  }
  const int64_t total = first_item[num_seqs];
  const int64_t q_stride = static_cast<int64_t>(shape.num_heads) * shape.head_dim;
  pool.Run([&](int thread_index, int num_threads) {
    const int64_t begin = total * thread_index / num_threads;
    const int64_t end = total * (thread_index + 1) / num_threads;
    float* scores = scratch + thread_index * max_positions;
    int s = static_cast<int>(std::upper_bound(first_item.begin(), first_item.end(), begin) -
                             first_item.begin()) - 1;
    for (int64_t item = begin; item < end; ++item) {
      while (item >= first_item[s + 1]) ++s;
      const int64_t local = item - first_item[s];
      const int32_t t = static_cast<int32_t>(local / shape.num_heads);
      const int32_t h = static_cast<int32_t>(local % shape.num_heads);
      const int64_t row = seqs[s].row_offset + t;
      AttendOne(k, kv, shape, seqs[s].block_table, seqs[s].start_pos + t, h,
                q + row * q_stride + h * shape.head_dim, out + row * q_stride + h * shape.head_dim,
                scores);
    }
  });
}

}  // namespace inflight::kernels
