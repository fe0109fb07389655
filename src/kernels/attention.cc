#include "kernels/attention.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/fp16.h"
#include "base/thread_pool.h"
#include "kernels/kernels.h"

namespace inflight::kernels {
namespace {

// Converts n floats to the cache type at dst (contiguous).
void StoreElements(DType dtype, void* base, int64_t offset, const float* src, int32_t n) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(static_cast<float*>(base) + offset, src, n * sizeof(float));
      break;
    case DType::kF16:
      ActiveKernels().f32_to_f16(src, static_cast<uint16_t*>(base) + offset, n);
      break;
    case DType::kBF16: {
      uint16_t* dst = static_cast<uint16_t*>(base) + offset;
      for (int32_t i = 0; i < n; ++i) dst[i] = Fp32ToBf16(src[i]);
      break;
    }
    default:
      INFLIGHT_CHECK(false);
  }
}

// Converts n floats to the cache type and stores them `stride` elements apart (a K column).
void StoreStrided(DType dtype, void* base, int64_t offset, int64_t stride, const float* src,
                  int32_t n) {
  if (dtype == DType::kF32) {
    float* dst = static_cast<float*>(base) + offset;
    for (int32_t i = 0; i < n; ++i) dst[i * stride] = src[i];
    return;
  }
  uint16_t converted[512];
  uint16_t* dst = static_cast<uint16_t*>(base) + offset;
  for (int32_t i0 = 0; i0 < n; i0 += 512) {
    const int32_t m = std::min<int32_t>(512, n - i0);
    if (dtype == DType::kF16)
      ActiveKernels().f32_to_f16(src + i0, converted, m);
    else
      for (int32_t i = 0; i < m; ++i) converted[i] = Fp32ToBf16(src[i0 + i]);
    for (int32_t i = 0; i < m; ++i) dst[(i0 + i) * stride] = converted[i];
  }
}

// One token's head values x[head_dim] as 8 bits with their F16 scale (attention.h): returns
// the scale's bits; q[i] = round(x[i] / scale) in [-127, 127].
uint16_t QuantizeKvRow(const float* x, int32_t n, int8_t* q) {
  float amax = 0.0f;
  for (int32_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const uint16_t scale_bits = Fp32ToFp16(amax / 127.0f);
  const float scale = Fp16ToFp32(scale_bits);
  const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
  for (int32_t i = 0; i < n; ++i) {
    const float r = std::nearbyint(x[i] * inv);  // NaN for NaN, or Inf times a zero inverse
    q[i] = std::isnan(r) ? int8_t{0} : static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f));
  }
  return scale_bits;
}

// Stores one token of one head of an 8-bit cache at `index` of its K and V tiles.
void StoreI8(const KvLayerView& kv, int64_t tile, int32_t index, const float* k, const float* v) {
  const int32_t tpb = kv.tokens_per_block, hd = kv.head_dim;
  int8_t q[512];
  INFLIGHT_CHECK(hd <= 512 && hd % 4 == 0 && tpb % 16 == 0);
  auto* kt = static_cast<uint8_t*>(kv.k) + tile;
  auto* vt = static_cast<uint8_t*>(kv.v) + tile;
  const uint16_t ks = QuantizeKvRow(k, hd, q);
  for (int32_t d = 0; d < hd; ++d)
    kt[(static_cast<int64_t>(d / 4) * tpb + index) * 4 + d % 4] = static_cast<uint8_t>(q[d] + 128);
  std::memcpy(kt + static_cast<int64_t>(tpb) * hd + 2 * index, &ks, 2);
  const uint16_t vs = QuantizeKvRow(v, hd, q);
  for (int32_t d = 0; d < hd; ++d)
    vt[(static_cast<int64_t>(index / 4) * hd + d) * 4 + index % 4] = static_cast<uint8_t>(q[d]);
  std::memcpy(vt + static_cast<int64_t>(tpb) * hd + 2 * index, &vs, 2);
}

}  // namespace

void CopyKvSlot(const KvLayerView& kv, int32_t from_block, int32_t from_index, int32_t to_block,
                int32_t to_index) {
  const int32_t heads = kv.kv_dim / kv.head_dim, tpb = kv.tokens_per_block, hd = kv.head_dim;
  for (int32_t h = 0; h < heads; ++h) {
    if (kv.dtype == DType::kI8) {
      const int64_t src = kv.TileByteOffset(from_block, h), dst = kv.TileByteOffset(to_block, h);
      auto* k = static_cast<uint8_t*>(kv.k);
      auto* v = static_cast<uint8_t*>(kv.v);
      for (int32_t q = 0; q < hd / 4; ++q) {
        std::memcpy(k + dst + (static_cast<int64_t>(q) * tpb + to_index) * 4,
                    k + src + (static_cast<int64_t>(q) * tpb + from_index) * 4, 4);
      }
      for (int32_t i = 0; i < hd; ++i) {
        v[dst + (static_cast<int64_t>(to_index / 4) * hd + i) * 4 + to_index % 4] =
            v[src + (static_cast<int64_t>(from_index / 4) * hd + i) * 4 + from_index % 4];
      }
      const int64_t scales = static_cast<int64_t>(tpb) * hd;
      std::memcpy(k + dst + scales + 2 * to_index, k + src + scales + 2 * from_index, 2);
      std::memcpy(v + dst + scales + 2 * to_index, v + src + scales + 2 * from_index, 2);
      continue;
    }
    const int64_t elem = kv.dtype == DType::kF32 ? 4 : 2;
    const int64_t src = kv.TileOffset(from_block, h) * elem,
                  dst = kv.TileOffset(to_block, h) * elem;
    auto* k = static_cast<uint8_t*>(kv.k);
    auto* v = static_cast<uint8_t*>(kv.v);
    for (int32_t i = 0; i < hd; ++i) {
      std::memcpy(k + dst + (static_cast<int64_t>(i) * tpb + to_index) * elem,
                  k + src + (static_cast<int64_t>(i) * tpb + from_index) * elem, elem);
    }
    std::memcpy(v + dst + static_cast<int64_t>(to_index) * hd * elem,
                v + src + static_cast<int64_t>(from_index) * hd * elem, hd * elem);
  }
}

int32_t TreeScratchBlocks(int32_t start_pos, int32_t num_tokens, const uint64_t* tree,
                          int32_t tokens_per_block) {
  int32_t blocks = 0;
  for (int32_t t = 0; t < num_tokens; ++t) {
    const int32_t depth = std::popcount(tree[t]) - 1;
    blocks += (start_pos % tokens_per_block + depth + tokens_per_block) / tokens_per_block;
  }
  return blocks;
}

namespace {

// The exact tree pass's block tables: token t's table is the sequence's up to start_pos's
// block, then scratch blocks holding that block's slots before start_pos and t's branch at
// consecutive positions (its causal length is start_pos + depth + 1).
struct TreeTables {
  std::vector<std::vector<int32_t>> tables;  // [token]
  std::vector<int32_t> len;                  // [token]
};

TreeTables BuildTreeTables(const KvLayerView& kv, const AttentionSeq& seq) {
  const int32_t tpb = kv.tokens_per_block, first = seq.start_pos / tpb,
                before = seq.start_pos % tpb;
  TreeTables out;
  const int32_t* scratch = seq.tree_scratch;
  for (int32_t t = 0; t < seq.num_tokens; ++t) {
    std::vector<int32_t> table(seq.block_table, seq.block_table + first);
    int32_t pos = seq.start_pos;  // the next consecutive position of t's branch
    auto slot_of = [&](int32_t p) { return std::make_pair(table[p / tpb], p % tpb); };
    const int32_t depth = std::popcount(seq.tree[t]) - 1;
    const int32_t blocks = (before + depth + tpb) / tpb;
    for (int32_t b = 0; b < blocks; ++b) table.push_back(*scratch++);
    // The positions before the tree in its first block: the whole block in two copies (its
    // slots from start_pos on are then overwritten by the branch, or never attended).
    if (before > 0) {
      const int64_t bytes = static_cast<int64_t>(kv.kv_dim / kv.head_dim) * kv.TileBytes();
      auto* k = static_cast<uint8_t*>(kv.k);
      auto* v = static_cast<uint8_t*>(kv.v);
      std::memcpy(k + kv.TileByteOffset(table[first], 0),
                  k + kv.TileByteOffset(seq.block_table[first], 0), bytes);
      std::memcpy(v + kv.TileByteOffset(table[first], 0),
                  v + kv.TileByteOffset(seq.block_table[first], 0), bytes);
    }
    for (int32_t j = 0; j < seq.num_tokens; ++j) {
      if (((seq.tree[t] >> j) & 1u) == 0) continue;
      const int32_t from = seq.start_pos + j;
      const auto [to_block, to_index] = slot_of(pos++);
      CopyKvSlot(kv, seq.block_table[from / tpb], from % tpb, to_block, to_index);
    }
    out.tables.push_back(std::move(table));
    out.len.push_back(pos);
  }
  return out;
}

}  // namespace

void WriteKv(const KvLayerView& kv, const AttentionSeq& seq, const float* k, const float* v) {
  INFLIGHT_CHECK(kv.head_dim > 0 && kv.kv_dim % kv.head_dim == 0);
  const int32_t heads = kv.kv_dim / kv.head_dim, tpb = kv.tokens_per_block;
  if (kv.dtype == DType::kI8) {
    for (int32_t t = 0; t < seq.num_tokens; ++t) {
      const int32_t pos = seq.start_pos + t;
      const int32_t block = seq.block_table[pos / tpb], index = pos % tpb;
      for (int32_t h = 0; h < heads; ++h) {
        const int64_t off =
            static_cast<int64_t>(t) * kv.kv_dim + static_cast<int64_t>(h) * kv.head_dim;
        StoreI8(kv, kv.TileByteOffset(block, h), index, k + off, v + off);
      }
    }
    return;
  }
  for (int32_t t = 0; t < seq.num_tokens; ++t) {
    const int32_t pos = seq.start_pos + t;
    const int32_t block = seq.block_table[pos / tpb], index = pos % tpb;
    const float* k_row = k + static_cast<int64_t>(t) * kv.kv_dim;
    const float* v_row = v + static_cast<int64_t>(t) * kv.kv_dim;
    for (int32_t h = 0; h < heads; ++h) {
      const int64_t tile = kv.TileOffset(block, h);
      StoreStrided(kv.dtype, kv.k, tile + index, tpb, k_row + static_cast<int64_t>(h) * kv.head_dim,
                   kv.head_dim);
      StoreElements(kv.dtype, kv.v, tile + static_cast<int64_t>(index) * kv.head_dim,
                    v_row + static_cast<int64_t>(h) * kv.head_dim, kv.head_dim);
    }
  }
}

namespace {

// Query rows per work item: a tile of consecutive tokens of one sequence times the heads of
// a K/V group, so a prompt chunk reads each K/V row once per tile instead of once per token.
constexpr int32_t kMaxRowsPerItem = 32;

int32_t TokensPerTile(const AttentionShape& shape) {
  return std::max<int32_t>(1, kMaxRowsPerItem / (shape.num_heads / shape.num_kv_heads));
}

}  // namespace

int32_t AttentionRowsPerItem(const AttentionShape& shape) {
  return TokensPerTile(shape) * (shape.num_heads / shape.num_kv_heads);
}

int64_t AttendRowsScratchFloats(int32_t num_rows, int32_t head_dim, int32_t tokens_per_block) {
  // Per row: a span's scores, the running output, max, sum, rescale factor and a block's
  // first and end positions; for 8-bit K/V the span's integer p . V, the row's 8-bit query and
  // the span's 8-bit probabilities (bytes) and their scales; 64 floats of slack.
  const int64_t span = AttentionSpanPositions(tokens_per_block);
  return static_cast<int64_t>(num_rows) * (span + 2 * head_dim + (head_dim + span) / 4 + 9) + 64;
}

int64_t AttentionScratchFloats(const AttentionShape& shape, int num_threads,
                               int32_t tokens_per_block) {
  return static_cast<int64_t>(num_threads) *
         AttendRowsScratchFloats(AttentionRowsPerItem(shape), shape.head_dim, tokens_per_block);
}

void PagedAttention(const KvLayerView& kv, const AttentionShape& shape, const AttentionSeq* seqs,
                    int num_seqs, const float* q, float* out, ThreadPool& pool, float* scratch) {
  INFLIGHT_CHECK(kv.head_dim == shape.head_dim && kv.kv_dim == shape.num_kv_heads * shape.head_dim);
  INFLIGHT_CHECK(shape.window >= 0 && shape.softcap >= 0.0f);
  const KernelTable& k = ActiveKernels();
  const int32_t group = shape.num_heads / shape.num_kv_heads;
  const int32_t tile = TokensPerTile(shape);
  // Work item = (sequence, tile of tokens, K/V head). Items are numbered sequence by sequence
  // and handed out in chunks as threads free up (later tiles of a prompt cost more).
  // Exact tree passes: each token alone over its own block table (a tile of one token).
  std::vector<TreeTables> trees(num_seqs);
  std::vector<int64_t> first_item(num_seqs + 1, 0);
  for (int s = 0; s < num_seqs; ++s) {
    INFLIGHT_CHECK(seqs[s].tree == nullptr || (seqs[s].num_tokens <= 64 && shape.window == 0));
    const bool exact_tree = seqs[s].tree != nullptr && seqs[s].tree_scratch != nullptr;
    if (exact_tree) trees[s] = BuildTreeTables(kv, seqs[s]);
    const int32_t seq_tile = exact_tree ? 1 : tile;
    const int64_t tiles = (seqs[s].num_tokens + seq_tile - 1) / seq_tile;
    first_item[s + 1] = first_item[s] + tiles * shape.num_kv_heads;
  }
  const int64_t total = first_item[num_seqs];
  const int64_t q_stride = static_cast<int64_t>(shape.num_heads) * shape.head_dim;
  const int64_t chunk = std::max<int64_t>(1, total / (8 * pool.num_threads()));
  const int64_t per_thread =
      AttendRowsScratchFloats(AttentionRowsPerItem(shape), shape.head_dim, kv.tokens_per_block);
  std::atomic<int64_t> next{0};
  pool.Run([&](int thread_index, int) {
    float* thread_scratch = scratch + thread_index * per_thread;
    std::vector<int32_t> len(AttentionRowsPerItem(shape));
    std::vector<const float*> q_rows(len.size());
    std::vector<float*> out_rows(len.size());
    std::vector<float> sinks(shape.sinks != nullptr ? len.size() : 0);
    std::vector<uint64_t> tree_bits(len.size());
    AttendRowsArgs args;
    args.scale = shape.scale, args.softcap = shape.softcap, args.window = shape.window;
    args.len = len.data(), args.q = q_rows.data(), args.out = out_rows.data();
    args.sinks = shape.sinks != nullptr ? sinks.data() : nullptr;
    for (;;) {
      const int64_t begin = next.fetch_add(chunk, std::memory_order_relaxed);
      if (begin >= total) return;
      const int64_t end = std::min(total, begin + chunk);
      int s = static_cast<int>(std::upper_bound(first_item.begin(), first_item.end(), begin) -
                               first_item.begin()) -
              1;
      for (int64_t item = begin; item < end; ++item) {
        while (item >= first_item[s + 1]) ++s;
        const AttentionSeq& seq = seqs[s];
        const bool exact_tree = !trees[s].tables.empty();
        const int32_t seq_tile = exact_tree ? 1 : tile;
        const int64_t local = item - first_item[s];
        const int32_t t0 = static_cast<int32_t>(local / shape.num_kv_heads) * seq_tile;
        const int32_t kvh = static_cast<int32_t>(local % shape.num_kv_heads);
        const int32_t tokens = std::min(seq_tile, seq.num_tokens - t0);
        int32_t rows = 0;
        for (int32_t t = t0; t < t0 + tokens; ++t) {
          const int64_t base =
              (seq.row_offset + t) * q_stride + static_cast<int64_t>(kvh) * group * shape.head_dim;
          for (int32_t g = 0; g < group; ++g, ++rows) {
            len[rows] = exact_tree ? trees[s].len[t] : seq.start_pos + t + 1;
            q_rows[rows] = q + base + static_cast<int64_t>(g) * shape.head_dim;
            out_rows[rows] = out + base + static_cast<int64_t>(g) * shape.head_dim;
            if (shape.sinks != nullptr) sinks[rows] = shape.sinks[kvh * group + g];
            if (seq.tree != nullptr) tree_bits[rows] = seq.tree[t];
          }
        }
        args.block_table = exact_tree ? trees[s].tables[t0].data() : seq.block_table;
        args.kv_head = kvh, args.num_rows = rows;
        args.tree_start = seq.start_pos;
        args.tree_bits = seq.tree != nullptr && !exact_tree ? tree_bits.data() : nullptr;
        k.attend_rows(kv, args, thread_scratch);
      }
    }
  });
}

}  // namespace inflight::kernels
