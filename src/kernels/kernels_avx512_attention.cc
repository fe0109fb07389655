// AVX-512 paged attention (attend_rows): online softmax over K/V tiles for the query rows of
// one K/V head, with the sliding window, logit soft-cap and sinks of AttendRowsArgs. Built with
// the AVX-512 flags; only called after the CPU check in kernels.cc. Each row's result is the
// scalar twin's (kernels_scalar.cc) up to the vector exp/tanh, whatever rows share the call.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/attention_avx512.h"
#include "kernels/exp_avx512.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

namespace inflight::kernels {

// 16 K/V elements as floats; kMasked reads only `lanes` (the others are 0). GCC 12 keeps
// the accumulators of a loop with masked loads in memory as well as in registers (a store of
// every accumulator per iteration), so full tiles use plain loads.
template <DType kKv, bool kMasked = false>
inline __m512 LoadKv(const void* base, int64_t i, __mmask16 lanes = 0xffff) {
  if constexpr (kKv == DType::kF32) {
    const float* p = static_cast<const float*>(base) + i;
    return kMasked ? _mm512_maskz_loadu_ps(lanes, p) : _mm512_loadu_ps(p);
  } else {
    const uint16_t* p = static_cast<const uint16_t*>(base) + i;
    const __m256i h = kMasked ? _mm256_maskz_loadu_epi16(lanes, p)
                              : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if constexpr (kKv == DType::kF16)
      return _mm512_cvtph_ps(h);
    else
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// Scores of kRows query rows against kVecs x 16 positions of a K tile ([head_dim][tpb]):
// s[g][c] = scale * sum_d q[g][d] * K[d][pos], one broadcast q element times 16 positions per
// FMA, the sum over d in order (the same sequence for a row whatever rows share the call).
// kMasked: tiles narrower than 16 positions (lanes marks them).
template <DType kKv, bool kMasked, int kRows, int kVecs>
inline void ScoreRows(const KvLayerView& kv, int64_t tile, int32_t pos0, __mmask16 lanes,
                      const float* const* q, float scale, float* probs, int32_t probs_stride) {
  const int32_t tpb = kv.tokens_per_block, hd = kv.head_dim;
  const float* qr[kRows];
  for (int g = 0; g < kRows; ++g) qr[g] = q[g];
  __m512 s[kRows * kVecs];
  for (int i = 0; i < kRows * kVecs; ++i) s[i] = _mm512_setzero_ps();
  const void* k_tile =
      static_cast<const char*>(kv.k) + (tile + pos0) * (kKv == DType::kF32 ? 4 : 2);
  for (int32_t d = 0; d < hd; ++d) {
    __m512 k[kVecs];
    for (int c = 0; c < kVecs; ++c)
      k[c] = LoadKv<kKv, kMasked>(k_tile, static_cast<int64_t>(d) * tpb + 16 * c, lanes);
    for (int g = 0; g < kRows; ++g) {
      const __m512 qd = _mm512_set1_ps(qr[g][d]);
      for (int c = 0; c < kVecs; ++c)
        s[g * kVecs + c] = _mm512_fmadd_ps(qd, k[c], s[g * kVecs + c]);
    }
  }
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int g = 0; g < kRows; ++g) {
    for (int c = 0; c < kVecs; ++c) {
      _mm512_mask_storeu_ps(probs + static_cast<int64_t>(g) * probs_stride + pos0 + 16 * c, lanes,
                            _mm512_mul_ps(s[g * kVecs + c], vscale));
    }
  }
}

template <DType kKv, bool kMasked, int kVecs>
inline void ScoreAllRows(const KvLayerView& kv, int64_t tile, int32_t pos0, __mmask16 lanes,
                         int32_t num_rows, const float* const* q, float scale, float* probs,
                         int32_t stride) {
  for (int32_t r = 0; r < num_rows;) {
    float* p = probs + static_cast<int64_t>(r) * stride;
    const int32_t left = num_rows - r;
    if (left >= 8)
      ScoreRows<kKv, kMasked, 8, kVecs>(kv, tile, pos0, lanes, q + r, scale, p, stride), r += 8;
    else if (left >= 4)
      ScoreRows<kKv, kMasked, 4, kVecs>(kv, tile, pos0, lanes, q + r, scale, p, stride), r += 4;
    else if (left >= 2)
      ScoreRows<kKv, kMasked, 2, kVecs>(kv, tile, pos0, lanes, q + r, scale, p, stride), r += 2;
    else
      ScoreRows<kKv, kMasked, 1, kVecs>(kv, tile, pos0, lanes, q + r, scale, p, stride), r += 1;
  }
}

// acc[g][chunks c0..c0+kPass) = acc * alpha[g] (when alpha is given) + sum over
// first[g] <= j < valid[g] of p[g][j] * V[j] for kRows rows: kRows x kPass accumulators, each
// V chunk converted once for the kRows rows. Each (row, chunk) sees the same FMA sequence
// over j whatever the grouping. kFirst: some row's window starts inside the block (without
// it first[] is all 0 and unread: the loop of every other block stays as lean as it was).
template <DType kKv, int kRows, int kPass, bool kFirst>
inline void AccumulateVPass(const KvLayerView& kv, int64_t tile, int32_t c0, const int32_t* first,
                            const int32_t* valid, const float* alpha, const float* probs,
                            int32_t stride, float* acc) {
  const int32_t hd = kv.head_dim;
  __m512 a[kRows * kPass];
  int32_t common = kv.tokens_per_block, most = 0, j = 0, last_first = 0;
  for (int g = 0; g < kRows; ++g) {
    const float* src = acc + static_cast<int64_t>(g) * hd + 16 * c0;
    const __m512 scale = _mm512_set1_ps(alpha != nullptr ? alpha[g] : 1.0f);
    for (int c = 0; c < kPass; ++c) {
      a[g * kPass + c] = alpha != nullptr ? _mm512_mul_ps(_mm512_loadu_ps(src + 16 * c), scale)
                                          : _mm512_loadu_ps(src + 16 * c);
    }
    common = std::min(common, valid[g]), most = std::max(most, valid[g]);
  }
  const void* v_base =
      static_cast<const char*>(kv.v) + (tile + 16 * c0) * (kKv == DType::kF32 ? 4 : 2);
  if constexpr (kFirst) {  // the block sliding windows start in: rows start apart
    j = kv.tokens_per_block;
    for (int g = 0; g < kRows; ++g)
      j = std::min(j, first[g]), last_first = std::max(last_first, first[g]);
    for (; j < last_first; ++j) {
      __m512 v[kPass];
      for (int c = 0; c < kPass; ++c)
        v[c] = LoadKv<kKv>(v_base, static_cast<int64_t>(j) * hd + 16 * c);
      for (int g = 0; g < kRows; ++g) {
        if (j < first[g] || j >= valid[g]) continue;
        const __m512 p = _mm512_set1_ps(probs[static_cast<int64_t>(g) * stride + j]);
        for (int c = 0; c < kPass; ++c)
          a[g * kPass + c] = _mm512_fmadd_ps(p, v[c], a[g * kPass + c]);
      }
    }
  }
  for (; j < common; ++j) {
    __m512 v[kPass];
    for (int c = 0; c < kPass; ++c)
      v[c] = LoadKv<kKv>(v_base, static_cast<int64_t>(j) * hd + 16 * c);
    for (int g = 0; g < kRows; ++g) {
      const __m512 p = _mm512_set1_ps(probs[static_cast<int64_t>(g) * stride + j]);
      for (int c = 0; c < kPass; ++c) a[g * kPass + c] = _mm512_fmadd_ps(p, v[c], a[g * kPass + c]);
    }
  }
  for (; j < most; ++j) {  // the last positions of a prompt tile: rows end at different places
    __m512 v[kPass];
    for (int c = 0; c < kPass; ++c)
      v[c] = LoadKv<kKv>(v_base, static_cast<int64_t>(j) * hd + 16 * c);
    for (int g = 0; g < kRows; ++g) {
      if (j >= valid[g]) continue;
      const __m512 p = _mm512_set1_ps(probs[static_cast<int64_t>(g) * stride + j]);
      for (int c = 0; c < kPass; ++c) a[g * kPass + c] = _mm512_fmadd_ps(p, v[c], a[g * kPass + c]);
    }
  }
  for (int g = 0; g < kRows; ++g) {
    for (int c = 0; c < kPass; ++c)
      _mm512_storeu_ps(acc + static_cast<int64_t>(g) * hd + 16 * (c0 + c), a[g * kPass + c]);
  }
}

// One block's p . V for every row: rows in groups of 8 / 4 / 2 / 1, head_dim in passes of 16
// accumulators (8 rows x 2 chunks, 4 x 4, ...).
template <DType kKv, int kChunks, int kRows, bool kFirst>
inline void AccumulateVGroup(const KvLayerView& kv, int64_t tile, const int32_t* first,
                             const int32_t* valid, const float* alpha, const float* probs,
                             int32_t stride, float* acc) {
  constexpr int kPass = std::min(kChunks, 16 / kRows);
  int32_t c0 = 0;
  for (; c0 + kPass <= kChunks; c0 += kPass) {
    AccumulateVPass<kKv, kRows, kPass, kFirst>(kv, tile, c0, first, valid, alpha, probs, stride,
                                               acc);
  }
  if constexpr (kChunks % kPass != 0) {  // (GCC warns of the empty loop otherwise)
    for (; c0 < kChunks; ++c0)
      AccumulateVPass<kKv, kRows, 1, kFirst>(kv, tile, c0, first, valid, alpha, probs, stride, acc);
  }
}

template <DType kKv, int kChunks, bool kFirst>
inline void AccumulateV(const KvLayerView& kv, int64_t tile, int32_t num_rows, const int32_t* first,
                        const int32_t* valid, const float* alpha, const float* probs,
                        int32_t stride, float* acc) {
  constexpr int64_t kHd = 16 * kChunks;
  for (int32_t r = 0; r < num_rows;) {
    const int32_t left = num_rows - r;
    const float* a = alpha != nullptr ? alpha + r : nullptr;
    const float* p = probs + static_cast<int64_t>(r) * stride;
    float* out = acc + r * kHd;
    if (left >= 4)
      AccumulateVGroup<kKv, kChunks, 4, kFirst>(kv, tile, first + r, valid + r, a, p, stride, out),
          r += 4;
    else if (left >= 2)
      AccumulateVGroup<kKv, kChunks, 2, kFirst>(kv, tile, first + r, valid + r, a, p, stride, out),
          r += 2;
    else
      AccumulateVGroup<kKv, kChunks, 1, kFirst>(kv, tile, first + r, valid + r, a, p, stride, out),
          r += 1;
  }
}

// Query rows against one K/V head's tiles, a span of blocks at a time (see attention.h and
// the scalar twin, which goes block by block): every row's scores over the span
// (ScoreRows), each row's online-softmax update (soft-cap, new max, rescale factor of what
// was accumulated, probabilities), then p . V of each block added to the rescaled outputs
// (AccumulateV). Spans of 128 positions keep the per-row reductions and exp of the update
// rare. Span boundaries are absolute positions and a row's lanes are its positions modulo
// 16, so a row's arithmetic does not depend on the rows it shares the call with. The walk
// starts at the first block a row sees (kWindow: sliding windows, their own instantiation so
// the causal loop stays as lean as it was); a sink starts its row's running max and sum. The
// next block's tiles are prefetched while one is scored.
template <DType kKv, int kChunks, bool kWindow>
void AttendRowsVec(const KvLayerView& kv, const AttendRowsArgs& args, float* scratch) {
  constexpr int kHd = 16 * kChunks;
  const int32_t num_rows = args.num_rows, tpb = kv.tokens_per_block,
                span = AttentionSpanPositions(tpb);
  const int32_t* len = args.len;
  float* probs = scratch;                                      // [rows][span]
  float* acc = probs + static_cast<int64_t>(num_rows) * span;  // [rows][head_dim]
  float* row_max = acc + static_cast<int64_t>(num_rows) * kHd;
  float* row_sum = row_max + num_rows;
  float* alpha = row_sum + num_rows;
  auto* valid = reinterpret_cast<int32_t*>(alpha + num_rows);  // end of a block's seen positions
  int32_t* first = valid + num_rows;                           // and their start
  int32_t n = 0, first_pos = kWindow ? INT32_MAX : 0;
  for (int32_t r = 0; r < num_rows; ++r) {
    n = std::max(n, len[r]);
    if constexpr (kWindow) first_pos = std::min(first_pos, args.FirstSeen(r));
    row_max[r] = args.sinks != nullptr ? args.sinks[r] : -INFINITY;
    row_sum[r] = args.sinks != nullptr ? 1.0f : 0.0f;
  }
  std::fill(acc, acc + static_cast<int64_t>(num_rows) * kHd, 0.0f);
  const __mmask16 lanes =
      tpb >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << tpb) - 1);
  const int32_t vecs = std::max(1, tpb / 16), first_block = first_pos / tpb;
  const int64_t elem_bytes = kKv == DType::kF32 ? 4 : 2,
                tile_bytes = kv.TileElements() * elem_bytes;
  int64_t tiles[kMaxSpanBlocks];
  for (int32_t p0 = first_block * tpb / span * span; p0 < n; p0 += span) {
    const int32_t b0 = p0 / tpb, blocks = (std::min(span, n - p0) + tpb - 1) / tpb,
                  i0 = std::max(0, first_block - b0);
    for (int32_t i = i0; i < blocks; ++i) {
      const int32_t b = b0 + i;
      tiles[i] = kv.TileOffset(args.block_table[b], args.kv_head);
      if (static_cast<int64_t>(b + 1) * tpb < n) {
        PrefetchTiles(kv.k, kv.v, kv.TileOffset(args.block_table[b + 1], args.kv_head) * elem_bytes,
                      tile_bytes);
      }
      float* block_probs = probs + static_cast<int64_t>(i) * tpb;
      if (tpb < 16) {
        ScoreAllRows<kKv, true, 1>(kv, tiles[i], 0, lanes, num_rows, args.q, args.scale,
                                   block_probs, span);
      } else {
        for (int32_t v0 = 0; v0 < vecs; v0 += 2) {
          if (vecs - v0 >= 2)
            ScoreAllRows<kKv, false, 2>(kv, tiles[i], 16 * v0, lanes, num_rows, args.q, args.scale,
                                        block_probs, span);
          else
            ScoreAllRows<kKv, false, 1>(kv, tiles[i], 16 * v0, lanes, num_rows, args.q, args.scale,
                                        block_probs, span);
        }
      }
    }
    for (int32_t r = 0; r < num_rows; ++r) {
      const int32_t lo = kWindow ? std::clamp(args.FirstSeen(r) - p0, 0, span) : 0,
                    hi = std::clamp(len[r] - p0, 0, span);
      float* scores = probs + static_cast<int64_t>(r) * span;
      SoftmaxUpdate(scores, lo, hi, TreeMask(args, r, scores, p0, lo, hi), &row_max[r], &row_sum[r],
                    &alpha[r]);
    }
    for (int32_t i = i0; i < blocks; ++i) {
      const int32_t pb = p0 + i * tpb;
      [[maybe_unused]] bool starts = false;
      for (int32_t r = 0; r < num_rows; ++r) {
        valid[r] = std::clamp(len[r] - pb, 0, tpb);
        if constexpr (kWindow) {
          first[r] = std::clamp(args.FirstSeen(r) - pb, 0, tpb);
          if (first[r] >= valid[r]) first[r] = valid[r] = 0;  // nothing of this block
          starts |= first[r] > 0;
        }
      }
      const float* a = i == i0 ? alpha : nullptr;
      const float* block_probs = probs + static_cast<int64_t>(i) * tpb;
      if constexpr (kWindow) {
        if (starts) {
          AccumulateV<kKv, kChunks, true>(kv, tiles[i], num_rows, first, valid, a, block_probs,
                                          span, acc);
          continue;
        }
      }
      AccumulateV<kKv, kChunks, false>(kv, tiles[i], num_rows, first, valid, a, block_probs, span,
                                       acc);
    }
  }
  for (int32_t r = 0; r < num_rows; ++r) {
    const __m512 inv = _mm512_set1_ps(1.0f / row_sum[r]);
    for (int c = 0; c < kChunks; ++c) {
      _mm512_storeu_ps(
          args.out[r] + 16 * c,
          _mm512_mul_ps(_mm512_loadu_ps(acc + static_cast<int64_t>(r) * kHd + 16 * c), inv));
    }
  }
}

template <DType kKv, int kChunks>
void AttendRowsOfWidth(const KvLayerView& kv, const AttendRowsArgs& args, float* scratch) {
  if (args.window > 0)
    AttendRowsVec<kKv, kChunks, true>(kv, args, scratch);
  else
    AttendRowsVec<kKv, kChunks, false>(kv, args, scratch);
}

template <DType kKv>
bool AttendRowsOfType(const KvLayerView& kv, const AttendRowsArgs& args, float* scratch) {
  switch (kv.head_dim) {
    case 16:
      AttendRowsOfWidth<kKv, 1>(kv, args, scratch);
      return true;
    case 32:
      AttendRowsOfWidth<kKv, 2>(kv, args, scratch);
      return true;
    case 64:
      AttendRowsOfWidth<kKv, 4>(kv, args, scratch);
      return true;
    case 80:
      AttendRowsOfWidth<kKv, 5>(kv, args, scratch);
      return true;
    case 96:
      AttendRowsOfWidth<kKv, 6>(kv, args, scratch);
      return true;
    case 128:
      AttendRowsOfWidth<kKv, 8>(kv, args, scratch);
      return true;
    case 256:
      AttendRowsOfWidth<kKv, 16>(kv, args, scratch);
      return true;
    default:
      return false;
  }
}

void AttendRowsAvx512(const KvLayerView& kv, const AttendRowsArgs& args, float* scratch) {
  bool done = false;
  switch (kv.dtype) {
    case DType::kF32:
      done = AttendRowsOfType<DType::kF32>(kv, args, scratch);
      break;
    case DType::kF16:
      done = AttendRowsOfType<DType::kF16>(kv, args, scratch);
      break;
    case DType::kBF16:
      done = AttendRowsOfType<DType::kBF16>(kv, args, scratch);
      break;
    case DType::kI8:
      done = AttendRowsI8Avx512(kv, args, scratch);
      break;
    default:
      break;
  }
  if (!done) GetKernels(SimdLevel::kScalar).attend_rows(kv, args, scratch);
}

}  // namespace inflight::kernels
