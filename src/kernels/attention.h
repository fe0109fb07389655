// Paged attention: K/V live in fixed-size blocks of a pool; a sequence reaches its tokens
// through a block table (position p is slot table[p / tokens_per_block] * tokens_per_block +
// p % tokens_per_block). Context chunks and single generation tokens of many sequences run
// in one call. A contiguous cache is the special case table = {0, 1, 2, ...}.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace inflight {
class ThreadPool;
}

namespace inflight::kernels {

// One layer of the cache.
struct KvLayerView {
  void* k = nullptr;  // [num_blocks, tokens_per_block, kv_dim]
  void* v = nullptr;  // [num_blocks, tokens_per_block, kv_dim]
  DType dtype = DType::kF16;  // kF32, kF16 or kBF16
  int32_t tokens_per_block = 32;
  int32_t kv_dim = 0;  // num_kv_heads * head_dim
};

struct AttentionShape {
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  float scale = 1.0f;  // usually 1 / sqrt(head_dim)
};

// The new tokens of one sequence in a step: rows [row_offset, row_offset + num_tokens) of
// q / out, at positions start_pos.. (they attend to positions 0..their own, causally).
struct AttentionSeq {
  const int32_t* block_table = nullptr;
  int32_t start_pos = 0;
  int32_t num_tokens = 0;
  int64_t row_offset = 0;
};

// Stores k/v rows ([num_tokens, kv_dim] each) at the sequence's positions.
void WriteKv(const KvLayerView& kv, const AttentionSeq& seq, const float* k, const float* v);

// out[row, h * head_dim ..] = softmax(q . K^T * scale) V for every sequence's new tokens.
// scratch: AttentionScratchFloats(shape, pool threads, max_positions) floats.
int64_t AttentionScratchFloats(const AttentionShape& shape, int num_threads, int64_t max_positions);
void PagedAttention(const KvLayerView& kv, const AttentionShape& shape, const AttentionSeq* seqs,
                    int num_seqs, const float* q, float* out, ThreadPool& pool, float* scratch,
                    int64_t max_positions);

}  // namespace inflight::kernels
