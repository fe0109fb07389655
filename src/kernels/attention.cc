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

namespace {

// Query rows per work item: a tile of consecutive tokens of one sequence times the heads of
// a K/V group, so a prompt chunk reads each K/V row once per tile instead of once per token.
constexpr int32_t kMaxRowsPerItem = 32;

int32_t TokensPerTile(const AttentionShape& shape) {
  return std::max<int32_t>(1, kMaxRowsPerItem / (shape.num_heads / shape.num_kv_heads));
}

int32_t RowsPerItem(const AttentionShape& shape) {
  return TokensPerTile(shape) * (shape.num_heads / shape.num_kv_heads);
}

}  // namespace

int64_t AttentionScratchFloats(const AttentionShape& shape, int num_threads, int64_t max_positions) {
  return static_cast<int64_t>(num_threads) * (RowsPerItem(shape) + 1) * max_positions;
}

void PagedAttention(const KvLayerView& kv, const AttentionShape& shape, const AttentionSeq* seqs,
                    int num_seqs, const float* q, float* out, ThreadPool& pool, float* scratch,
                    int64_t max_positions) {
  const KernelTable& k = ActiveKernels();
  const int32_t group = shape.num_heads / shape.num_kv_heads;
  const int32_t tile = TokensPerTile(shape);
  // Work item = (sequence, tile of tokens, K/V head). Items are numbered sequence by sequence
  // and handed out in chunks as threads free up (later tiles of a prompt cost more).
  std::vector<int64_t> first_item(num_seqs + 1, 0);
  for (int s = 0; s < num_seqs; ++s) {
    const int64_t tiles = (seqs[s].num_tokens + tile - 1) / tile;
    first_item[s + 1] = first_item[s] + tiles * shape.num_kv_heads;
  }
  const int64_t total = first_item[num_seqs];
  const int64_t q_stride = static_cast<int64_t>(shape.num_heads) * shape.head_dim;
  const int64_t chunk = std::max<int64_t>(1, total / (8 * pool.num_threads()));
  const int64_t per_thread = (RowsPerItem(shape) + 1) * max_positions;
  std::atomic<int64_t> next{0};
  pool.Run([&](int thread_index, int) {
    float* thread_scratch = scratch + thread_index * per_thread;
    std::vector<int32_t> len(RowsPerItem(shape));
    std::vector<const float*> q_rows(len.size());
    std::vector<float*> out_rows(len.size());
    for (;;) {
      const int64_t begin = next.fetch_add(chunk, std::memory_order_relaxed);
      if (begin >= total) return;
      const int64_t end = std::min(total, begin + chunk);
      int s = static_cast<int>(std::upper_bound(first_item.begin(), first_item.end(), begin) - first_item.begin()) - 1;
      for (int64_t item = begin; item < end; ++item) {
        while (item >= first_item[s + 1]) ++s;
        const AttentionSeq& seq = seqs[s];
        const int64_t local = item - first_item[s];
        const int32_t t0 = static_cast<int32_t>(local / shape.num_kv_heads) * tile;
        const int32_t kvh = static_cast<int32_t>(local % shape.num_kv_heads);
        const int32_t tokens = std::min(tile, seq.num_tokens - t0);
        int32_t rows = 0;
        for (int32_t t = t0; t < t0 + tokens; ++t) {
          const int64_t base = (seq.row_offset + t) * q_stride + static_cast<int64_t>(kvh) * group * shape.head_dim;
          for (int32_t g = 0; g < group; ++g, ++rows) {
            len[rows] = seq.start_pos + t + 1;
            q_rows[rows] = q + base + static_cast<int64_t>(g) * shape.head_dim;
            out_rows[rows] = out + base + static_cast<int64_t>(g) * shape.head_dim;
          }
        }
        k.attend_rows(kv, seq.block_table, static_cast<int64_t>(kvh) * shape.head_dim, shape.head_dim, shape.scale, rows,
                      len.data(), q_rows.data(), out_rows.data(), thread_scratch);
      }
    }
  });
}

}  // namespace inflight::kernels
