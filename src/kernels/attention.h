// Paged attention: K/V live in fixed-size blocks of a pool; a sequence reaches its tokens
// through a block table (position p is in block table[p / tokens_per_block], at index
// p % tokens_per_block). Context chunks and single generation tokens of many sequences run
// in one call. A contiguous cache is the special case table = {0, 1, 2, ...}.
//
// Inside a block each K/V head owns one contiguous tile (tokens_per_block * head_dim
// elements), so attention reads a head's keys and values as whole tiles:
//   K tile: [head_dim][tokens_per_block]  (dimension-major: 16 positions' scores per FMA)
//   V tile: [tokens_per_block][head_dim]  (row-major: one position's values per FMA row)
// Attention walks a sequence block by block with an online softmax (running max and sum per
// query row), so its scratch does not grow with the context.
//
// 8-bit K/V (kI8, kv_cache_dtype int8): one F16 scale per (token, head), so what a block holds
// never depends on how its tokens were batched or chunked (a per-block scale fixed by its first
// writes would). The tiles are laid out for the int8 dot instruction (vpdpbusd: 4 u8 x s8
// products per 32-bit lane), then the tile's scales:
//   K tile: [head_dim / 4][tokens_per_block][4] uint8, round(k / scale) + 128 (the unsigned
//           operand; q . k = q . (k + 128) - 128 * sum(q)), then [tokens_per_block] F16 scales
//   V tile: [tokens_per_block / 4][head_dim][4] int8, round(v / scale), then
//           [tokens_per_block] F16 scales
// scale = max |x| / 127 over the head's values of that token. tokens_per_block % 16 == 0.
#pragma once

#include <algorithm>
#include <cstdint>

#include "tensor/dtype.h"

namespace inflight {
class ThreadPool;
}

namespace inflight::kernels {

// One layer of the cache.
struct KvLayerView {
  void* k = nullptr;          // [num_blocks][num_kv_heads][head_dim][tokens_per_block]
  void* v = nullptr;          // [num_blocks][num_kv_heads][tokens_per_block][head_dim]
  DType dtype = DType::kF16;  // kF32, kF16, kBF16 or kI8
  int32_t tokens_per_block = 32;
  int32_t kv_dim = 0;  // num_kv_heads * head_dim
  int32_t head_dim = 0;

  int64_t TileElements() const { return static_cast<int64_t>(tokens_per_block) * head_dim; }
  // Element offset of K/V head `head`'s tile in block `block` (the same for K and V; not kI8).
  int64_t TileOffset(int32_t block, int32_t head) const {
    return (static_cast<int64_t>(block) * (kv_dim / head_dim) + head) * TileElements();
  }
  // Bytes of one tile, scales included.
  int64_t TileBytes() const { return KvTileBytes(dtype, tokens_per_block, head_dim); }
  // Byte offset of K/V head `head`'s tile in block `block` (the same for K and V).
  int64_t TileByteOffset(int32_t block, int32_t head) const {
    return (static_cast<int64_t>(block) * (kv_dim / head_dim) + head) * TileBytes();
  }
  static int64_t KvTileBytes(DType dtype, int32_t tokens_per_block, int32_t head_dim) {
    const int64_t n = static_cast<int64_t>(tokens_per_block) * head_dim;
    switch (dtype) {
      case DType::kF32:
        return 4 * n;
      case DType::kI8:
        return n + 2 * static_cast<int64_t>(tokens_per_block);  // values, then F16 scales
      default:
        return 2 * n;
    }
  }
};

struct AttentionShape {
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  float scale = 1.0f;  // usually 1 / sqrt(head_dim)
  // Gemma 2 logit soft-capping: score = softcap * tanh(scale * q.k / softcap). 0: none.
  float softcap = 0.0f;
  // Sliding window (llama.cpp's LLAMA_SWA_TYPE_STANDARD): the token at position p sees only
  // positions j with p - window < j <= p. 0: none. Blocks wholly before every window start
  // of a call are never read, so their table entries may be stale once freed.
  int32_t window = 0;
  // gpt-oss attention sinks: [num_heads] one learned logit per query head (not scaled),
  // an extra softmax-denominator term exp(sink - max) without a value. nullptr: none.
  const float* sinks = nullptr;
};

// The new tokens of one sequence in a step: rows [row_offset, row_offset + num_tokens) of
// q / out, at positions start_pos.. (they attend to positions 0..their own, causally, or to
// the last `window` of them).
//
// Tree attention (drafts verified as a tree, each path a candidate continuation): with `tree`,
// token t sees the positions before start_pos and the step's token j only if bit j of tree[t]
// is set (its ancestors and itself; ancestors come before their descendants). At most 64
// tokens, no sliding window (its window would count slots, not the branch's positions).
//
// With `tree_scratch` (TreeScratchBlocks(...) block ids the call may overwrite), the result is
// bit for bit the branch's run alone: each token's branch is copied behind the positions before
// start_pos into scratch blocks, at consecutive positions as the branch alone would hold them,
// and attended causally. Without, the step's tokens off a branch are masked in place: one pass,
// but the softmax sums in other SIMD lanes and spans than the branch alone (rounding differs).
struct AttentionSeq {
  const int32_t* block_table = nullptr;
  int32_t start_pos = 0;
  int32_t num_tokens = 0;
  int64_t row_offset = 0;
  const uint64_t* tree = nullptr;         // [num_tokens], or null: causal
  const int32_t* tree_scratch = nullptr;  // with a tree: scratch blocks, or null: masked
};

// Scratch blocks an exact tree pass needs: per token, the blocks from start_pos's block to the
// end of its branch.
int32_t TreeScratchBlocks(int32_t start_pos, int32_t num_tokens, const uint64_t* tree,
                          int32_t tokens_per_block);

// Copies slot from_index of block from_block to slot to_index of block to_block: every head's K
// and V with their scales, in the layer's layout (a verified tree's branch moves to the slots
// its positions own).
void CopyKvSlot(const KvLayerView& kv, int32_t from_block, int32_t from_index, int32_t to_block,
                int32_t to_index);

// Stores k/v rows ([num_tokens, kv_dim] each, heads side by side) at the sequence's positions.
void WriteKv(const KvLayerView& kv, const AttentionSeq& seq, const float* k, const float* v);

// out[row, h * head_dim ..] = softmax(q . K^T * scale) V for every sequence's new tokens
// (with the shape's window, soft-cap and sinks).
// scratch: AttentionScratchFloats(shape, pool threads, tokens_per_block) floats (independent
// of the context length).
int64_t AttentionScratchFloats(const AttentionShape& shape, int num_threads,
                               int32_t tokens_per_block);
void PagedAttention(const KvLayerView& kv, const AttentionShape& shape, const AttentionSeq* seqs,
                    int num_seqs, const float* q, float* out, ThreadPool& pool, float* scratch);

// Query rows per attend_rows call: a tile of consecutive tokens times the heads of a group.
int32_t AttentionRowsPerItem(const AttentionShape& shape);
// Positions whose scores one online-softmax update covers: whole blocks, about 128 positions.
constexpr int32_t kMaxSpanBlocks = 128;
inline int32_t AttentionSpanPositions(int32_t tokens_per_block) {
  return tokens_per_block * std::max<int32_t>(1, kMaxSpanBlocks / tokens_per_block);
}
// Scratch floats one attend_rows call needs for `num_rows` rows.
int64_t AttendRowsScratchFloats(int32_t num_rows, int32_t head_dim, int32_t tokens_per_block);

}  // namespace inflight::kernels
