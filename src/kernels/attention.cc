#include "kernels/attention.h"

#include <algorithm>
#include <atomic>
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
  const int32_t group = shape.num_heads / shape.num_kv_heads;
  // Work item = (token row, K/V head): the query heads of a group share their K/V reads.
  // Items are numbered sequence by sequence and handed out in chunks as threads free up.
  std::vector<int64_t> first_item(num_seqs + 1, 0);
  for (int s = 0; s < num_seqs; ++s) {
    first_item[s + 1] = first_item[s] + static_cast<int64_t>(seqs[s].num_tokens) * shape.num_kv_heads;
  }
  const int64_t total = first_item[num_seqs];
  const int64_t q_stride = static_cast<int64_t>(shape.num_heads) * shape.head_dim;
  const int64_t chunk = std::max<int64_t>(1, total / (8 * pool.num_threads()));
  std::atomic<int64_t> next{0};
  pool.Run([&](int thread_index, int) {
    float* thread_scratch = scratch + thread_index * (group + 1) * max_positions;
    for (;;) {
      const int64_t begin = next.fetch_add(chunk, std::memory_order_relaxed);
      if (begin >= total) return;
      const int64_t end = std::min(total, begin + chunk);
      int s = static_cast<int>(std::upper_bound(first_item.begin(), first_item.end(), begin) - first_item.begin()) - 1;
      for (int64_t item = begin; item < end; ++item) {
        while (item >= first_item[s + 1]) ++s;
        const int64_t local = item - first_item[s];
        const int32_t t = static_cast<int32_t>(local / shape.num_kv_heads);
        const int32_t kvh = static_cast<int32_t>(local % shape.num_kv_heads);
        const int64_t offset = seqs[s].row_offset * q_stride + t * q_stride + static_cast<int64_t>(kvh) * group * shape.head_dim;
        k.attend_heads(kv, seqs[s].block_table, seqs[s].start_pos + t + 1, static_cast<int64_t>(kvh) * shape.head_dim, group,
                       shape.head_dim, shape.scale, q + offset, out + offset, thread_scratch);
      }
    }
  });
}

}  // namespace inflight::kernels
