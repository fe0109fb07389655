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
    case DType::kF16:
      ActiveKernels().f32_to_f16(src, static_cast<uint16_t*>(base) + slot * kv_dim, kv_dim);
      break;
    case DType::kBF16: {
      uint16_t* dst = static_cast<uint16_t*>(base) + slot * kv_dim;
      for (int32_t i = 0; i < kv_dim; ++i) dst[i] = Fp32ToBf16(src[i]);
      break;
    }
    default: INFLIGHT_CHECK(false);
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
    float* scores = scratch + 2 * thread_index * max_positions;
    int s = static_cast<int>(std::upper_bound(first_item.begin(), first_item.end(), begin) -
                             first_item.begin()) - 1;
    for (int64_t item = begin; item < end; ++item) {
      while (item >= first_item[s + 1]) ++s;
      const int64_t local = item - first_item[s];
      const int32_t t = static_cast<int32_t>(local / shape.num_heads);
      const int32_t h = static_cast<int32_t>(local % shape.num_heads);
      const int64_t row = seqs[s].row_offset + t;
      const int32_t group = shape.num_heads / shape.num_kv_heads;
      k.attend_head(kv, seqs[s].block_table, seqs[s].start_pos + t + 1, static_cast<int64_t>(h / group) * shape.head_dim,
                    shape.head_dim, shape.scale, q + row * q_stride + h * shape.head_dim,
                    out + row * q_stride + h * shape.head_dim, scores);
    }
  });
}

}  // namespace inflight::kernels
