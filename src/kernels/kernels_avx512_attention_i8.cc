// AVX-512 paged attention over 8-bit K/V (attention.h's kI8 tiles) on the int8 dot instruction
// (vpdpbusd): each query row as 8 bits with one scale against the biased unsigned K, 64
// products per instruction; per block, each row's probabilities times V's scales as 8
// unsigned bits against the signed V. The integer model is the scalar twin's
// (AttendRowsI8Scalar); the walk (spans of blocks, online softmax, windows, soft-cap, sinks)
// is kernels_avx512_attention.cc's. A row's arithmetic does not depend on the rows it shares
// the call with.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/attention_avx512.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

namespace inflight::kernels {
namespace {

// The per-call state of the rows, in the caller's scratch (AttendRowsScratchFloats).
struct RowsState {
  float* probs;    // [rows][span]
  float* acc;      // [rows][head_dim]
  int32_t* acc32;  // [rows][head_dim] the span's integer p . V
  float* row_max;  // [rows]
  float* row_sum;
  float* alpha;
  float* qsc;     // query scale * attention scale
  float* ps;      // a block's probability scale
  int32_t* sumq;  // sum of the 8-bit query
  int32_t* valid;
  int32_t* first;
  int8_t* q8;   // [rows][head_dim]
  uint8_t* p8;  // [rows][span]
};

inline __m512 ScalesAt(const uint8_t* tile, int64_t tile_values, int32_t j) {
  return _mm512_cvtph_ps(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + tile_values + 2 * j)));
}

// s[g][pos0 + 16 v + lane] for kRows rows and kVecs groups of 16 positions of a K tile:
// sum over 4-element groups c of the row's 8-bit query quad c (broadcast) times the tile's
// quads of 16 positions, then (dot - 128 * sum(q)) * qsc * K scale.
template <int kRows, int kVecs, int kHd>
inline void ScoreRowsI8(const uint8_t* kt, int32_t tpb, int32_t pos0, const RowsState& st,
                        int32_t r0, int32_t stride) {
  __m512i s[kRows * kVecs];
  for (int i = 0; i < kRows * kVecs; ++i) s[i] = _mm512_setzero_si512();
  // The rows' queries are consecutive: every broadcast is one load at a constant offset.
  const int8_t* q = st.q8 + static_cast<int64_t>(r0) * kHd;
  const uint8_t* k0 = kt + static_cast<int64_t>(pos0) * 4;
  for (int32_t c = 0; c < kHd / 4; ++c) {
    __m512i k[kVecs];
    for (int v = 0; v < kVecs; ++v)
      k[v] = _mm512_loadu_si512(k0 + (static_cast<int64_t>(c) * tpb + 16 * v) * 4);
    for (int g = 0; g < kRows; ++g) {
      int32_t quad;
      std::memcpy(&quad, q + g * kHd + 4 * c, 4);
      const __m512i qb = _mm512_set1_epi32(quad);
      for (int v = 0; v < kVecs; ++v)
        s[g * kVecs + v] = _mm512_dpbusd_epi32(s[g * kVecs + v], k[v], qb);
    }
  }
  const int64_t tile_values = static_cast<int64_t>(tpb) * kHd;
  for (int v = 0; v < kVecs; ++v) {
    const __m512 ks = ScalesAt(kt, tile_values, pos0 + 16 * v);
    for (int g = 0; g < kRows; ++g) {
      const __m512i corr =
          _mm512_sub_epi32(s[g * kVecs + v], _mm512_set1_epi32(128 * st.sumq[r0 + g]));
      const __m512 x = _mm512_mul_ps(
          _mm512_mul_ps(_mm512_cvtepi32_ps(corr), _mm512_set1_ps(st.qsc[r0 + g])), ks);
      _mm512_storeu_ps(st.probs + static_cast<int64_t>(r0 + g) * stride + pos0 + 16 * v, x);
    }
  }
}

// The calls ScoreAllRowsI8 makes for num_rows rows (groups of 4, 2 and 1).
inline int32_t RowGroups(int32_t num_rows) {
  return num_rows / 4 + num_rows % 4 / 2 + num_rows % 2;
}

// Groups of at most 4 rows: 8 accumulators, 2 K vectors and a broadcast stay in registers (GCC
// 12 spills 8-row groups inside the loop).
template <int kVecs, int kHd>
inline void ScoreAllRowsI8(const uint8_t* kt, int32_t tpb, int32_t pos0, int32_t num_rows,
                           const RowsState& st, int32_t stride, int64_t probs_offset,
                           SpanPrefetch& prefetch) {
  RowsState at = st;
  at.probs = st.probs + probs_offset;
  for (int32_t r = 0; r < num_rows;) {
    prefetch.Step();
    const int32_t left = num_rows - r;
    if (left >= 4)
      ScoreRowsI8<4, kVecs, kHd>(kt, tpb, pos0, at, r, stride), r += 4;
    else if (left >= 2)
      ScoreRowsI8<2, kVecs, kHd>(kt, tpb, pos0, at, r, stride), r += 2;
    else
      ScoreRowsI8<1, kVecs, kHd>(kt, tpb, pos0, at, r, stride), r += 1;
  }
}

// acc32[g][chunks c0..c0+kPass) += sum over the block's positions j of p8[g][j] * V[j] in
// 32-bit integers, 4 positions per instruction.
template <int kRows, int kPass>
inline void AccumulateVPassI8(const int8_t* vt, int32_t hd, const uint8_t* p8, int32_t p8_stride,
                              int32_t quads, int32_t c0, const RowsState& st, int32_t r0) {
  // The span's integer sums so far (AttendRowsI8Vec scales them once per span: rounding per
  // block would make the result depend on the block size).
  __m512i s[kRows * kPass];
  for (int g = 0; g < kRows; ++g) {
    for (int c = 0; c < kPass; ++c)
      s[g * kPass + c] =
          _mm512_loadu_si512(st.acc32 + static_cast<int64_t>(r0 + g) * hd + 16 * (c0 + c));
  }
  for (int32_t jq = 0; jq < quads; ++jq) {
    __m512i v[kPass];
    for (int c = 0; c < kPass; ++c)
      v[c] = _mm512_loadu_si512(vt + (static_cast<int64_t>(jq) * hd + 16 * (c0 + c)) * 4);
    for (int g = 0; g < kRows; ++g) {
      int32_t quad;
      std::memcpy(&quad, p8 + static_cast<int64_t>(r0 + g) * p8_stride + 4 * jq, 4);
      const __m512i pb = _mm512_set1_epi32(quad);
      for (int c = 0; c < kPass; ++c)
        s[g * kPass + c] = _mm512_dpbusd_epi32(s[g * kPass + c], pb, v[c]);
    }
  }
  for (int g = 0; g < kRows; ++g) {
    for (int c = 0; c < kPass; ++c)
      _mm512_storeu_si512(st.acc32 + static_cast<int64_t>(r0 + g) * hd + 16 * (c0 + c),
                          s[g * kPass + c]);
  }
}

template <int kChunks, int kRows>
inline void AccumulateVGroupI8(const int8_t* vt, const uint8_t* p8, int32_t p8_stride,
                               int32_t quads, const RowsState& st, int32_t r0) {
  constexpr int kHd = 16 * kChunks;
  constexpr int kPass = std::min(kChunks, 16 / kRows);
  int32_t c0 = 0;
  for (; c0 + kPass <= kChunks; c0 += kPass)
    AccumulateVPassI8<kRows, kPass>(vt, kHd, p8, p8_stride, quads, c0, st, r0);
  if constexpr (kChunks % kPass != 0) {
    for (; c0 < kChunks; ++c0)
      AccumulateVPassI8<kRows, 1>(vt, kHd, p8, p8_stride, quads, c0, st, r0);
  }
}

// One block's p . V for every row, from the span's 8-bit probabilities (QuantizeSpanProbs).
template <int kChunks>
inline void AccumulateVI8(const int8_t* vt, const uint8_t* p8, int32_t p8_stride, int32_t num_rows,
                          const RowsState& st) {
  int32_t most = 0;
  for (int32_t r = 0; r < num_rows; ++r) most = std::max(most, st.valid[r]);
  const int32_t quads = (most + 3) / 4;
  for (int32_t r = 0; r < num_rows;) {
    const int32_t left = num_rows - r;
    if (left >= 4)
      AccumulateVGroupI8<kChunks, 4>(vt, p8, p8_stride, quads, st, r), r += 4;
    else if (left >= 2)
      AccumulateVGroupI8<kChunks, 2>(vt, p8, p8_stride, quads, st, r), r += 2;
    else
      AccumulateVGroupI8<kChunks, 1>(vt, p8, p8_stride, quads, st, r), r += 1;
  }
}

// Row r's online-softmax update over the span's scores p[lo, hi) (relative; the span's blocks
// cover [begin, end)) and its probabilities times V's scales as 8 unsigned bits against their
// largest (0 elsewhere): one scale per row and span. Spans are 128 absolute positions, so the
// rounding depends neither on the block size nor on the rows sharing the call. One pass takes
// exp, the sum, V's scale and the largest; a second rounds.
inline void SoftmaxSpanToBytes(float* p, uint8_t* p8, int32_t lo, int32_t hi, int32_t begin,
                               int32_t end, int32_t tpb, int64_t tile_values, const int8_t* v,
                               const int64_t* tiles, float softcap, float* row_max, float* row_sum,
                               float* alpha, float* ps) {
  const float new_max = std::fmax(*row_max, SpanMax(p, lo, hi, softcap));
  if (hi <= lo || new_max == -INFINITY) lo = hi = 0;  // nothing seen (so far)
  const __m512 vnew = _mm512_set1_ps(new_max);
  __m512 vsum = _mm512_setzero_ps(), vmax = _mm512_setzero_ps();
  for (int32_t b0 = begin; b0 < end; b0 += tpb) {
    const auto* tile = reinterpret_cast<const uint8_t*>(v + tiles[b0 / tpb]) + tile_values;
    for (int32_t j = b0; j < b0 + tpb; j += 16) {
      const __mmask16 m = LaneRange(j, lo, hi);
      const __m512 e = _mm512_maskz_mov_ps(
          m, ExpNonPositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, p + j), vnew)));
      vsum = _mm512_add_ps(vsum, e);
      // Masked: the scales of positions past a sequence's end may be anything.
      const __m512 x = _mm512_maskz_mul_ps(
          m, e,
          _mm512_cvtph_ps(_mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(tile + 2 * static_cast<int64_t>(j - b0)))));
      _mm512_storeu_ps(p + j, x);
      vmax = _mm512_max_ps(vmax, x);
    }
  }
  *alpha = hi > lo ? std::exp(*row_max - new_max) : 1.0f;
  if (hi > lo) {
    *row_sum = *row_sum * *alpha + _mm512_reduce_add_ps(vsum);
    *row_max = new_max;
  }
  const float pmax = _mm512_reduce_max_ps(vmax);
  const __m512 pinv = _mm512_set1_ps(pmax > 0.0f ? 255.0f / pmax : 0.0f),
               top = _mm512_set1_ps(255.0f);
  *ps = pmax / 255.0f;
  for (int32_t j = begin; j < end; j += 16) {
    const __m512 x = _mm512_min_ps(_mm512_mul_ps(_mm512_loadu_ps(p + j), pinv), top);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p8 + j),
                     _mm512_cvtusepi32_epi8(_mm512_cvtps_epi32(x)));
  }
}

// The rows' 8-bit queries: q8 = round(q * 127 / max|q|), their sums and scales.
template <int kChunks>
void QuantizeQueries(const AttendRowsArgs& args, const RowsState& st) {
  constexpr int kHd = 16 * kChunks;
  for (int32_t r = 0; r < args.num_rows; ++r) {
    const float* q = args.q[r];
    __m512 vmax = _mm512_setzero_ps();
    for (int c = 0; c < kChunks; ++c)
      vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(q + 16 * c)));
    const float qa = _mm512_reduce_max_ps(vmax);
    const __m512 inv = _mm512_set1_ps(qa > 0.0f ? 127.0f / qa : 0.0f), lo = _mm512_set1_ps(-127.0f),
                 hi = _mm512_set1_ps(127.0f);
    __m512i sum = _mm512_setzero_si512();
    for (int c = 0; c < kChunks; ++c) {
      const __m512 x =
          _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(q + 16 * c), inv), lo), hi);
      const __m512i i = _mm512_cvtps_epi32(x);
      sum = _mm512_add_epi32(sum, i);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(st.q8 + static_cast<int64_t>(r) * kHd + 16 * c),
                       _mm512_cvtsepi32_epi8(i));
    }
    st.sumq[r] = _mm512_reduce_add_epi32(sum);
    st.qsc[r] = qa / 127.0f * args.scale;
  }
}

// The walk of kernels_avx512_attention.cc's AttendRowsVec over 8-bit tiles.
template <int kChunks, bool kWindow>
void AttendRowsI8Vec(const KvLayerView& kv, const AttendRowsArgs& args, float* scratch) {
  constexpr int kHd = 16 * kChunks;
  const int32_t num_rows = args.num_rows, tpb = kv.tokens_per_block,
                span = AttentionSpanPositions(tpb);
  const int32_t* len = args.len;
  RowsState st;
  st.probs = scratch;
  st.acc = st.probs + static_cast<int64_t>(num_rows) * span;
  st.acc32 = reinterpret_cast<int32_t*>(st.acc + static_cast<int64_t>(num_rows) * kHd);
  st.row_max = reinterpret_cast<float*>(st.acc32 + static_cast<int64_t>(num_rows) * kHd);
  st.row_sum = st.row_max + num_rows;
  st.alpha = st.row_sum + num_rows;
  st.qsc = st.alpha + num_rows;
  st.ps = st.qsc + num_rows;
  st.sumq = reinterpret_cast<int32_t*>(st.ps + num_rows);
  st.valid = st.sumq + num_rows;
  st.first = st.valid + num_rows;
  st.q8 = reinterpret_cast<int8_t*>(st.first + num_rows);
  st.p8 = reinterpret_cast<uint8_t*>(st.q8 + static_cast<int64_t>(num_rows) * kHd);
  QuantizeQueries<kChunks>(args, st);
  int32_t n = 0, first_pos = kWindow ? INT32_MAX : 0;
  for (int32_t r = 0; r < num_rows; ++r) {
    n = std::max(n, len[r]);
    if constexpr (kWindow) first_pos = std::min(first_pos, args.FirstSeen(r));
    st.row_max[r] = args.sinks != nullptr ? args.sinks[r] : -INFINITY;
    st.row_sum[r] = args.sinks != nullptr ? 1.0f : 0.0f;
  }
  std::fill(st.acc, st.acc + static_cast<int64_t>(num_rows) * kHd, 0.0f);
  std::fill(st.acc32, st.acc32 + static_cast<int64_t>(num_rows) * kHd, 0);
  const int32_t vecs = tpb / 16, first_block = first_pos / tpb;
  SpanPrefetch prefetch(kv.k, kv.v, kv.TileBytes());
  int64_t tiles[kMaxSpanBlocks], next_tiles[kMaxSpanBlocks];
  for (int32_t p0 = first_block * tpb / span * span; p0 < n; p0 += span) {
    const int32_t b0 = p0 / tpb, blocks = (std::min(span, n - p0) + tpb - 1) / tpb,
                  i0 = std::max(0, first_block - b0);
    for (int32_t i = i0; i < blocks; ++i)
      tiles[i] = kv.TileByteOffset(args.block_table[b0 + i], args.kv_head);
    if (p0 <= first_pos) prefetch.Start(tiles + i0, blocks - i0, 0);  // nothing to overlap
    // The next span's tiles, a few lines before each row group's scores, each row's softmax
    // and each block's p . V.
    const int32_t next_blocks = p0 + span < n ? (std::min(span, n - p0 - span) + tpb - 1) / tpb : 0;
    for (int32_t i = 0; i < next_blocks; ++i)
      next_tiles[i] = kv.TileByteOffset(args.block_table[b0 + blocks + i], args.kv_head);
    prefetch.Start(next_tiles, next_blocks,
                   (blocks - i0) * ((vecs + 1) / 2 * RowGroups(num_rows) + 1) + num_rows);
    for (int32_t i = i0; i < blocks; ++i) {
      const auto* kt = static_cast<const uint8_t*>(kv.k) + tiles[i];
      for (int32_t v0 = 0; v0 < vecs; v0 += 2) {
        const int64_t off = static_cast<int64_t>(i) * tpb;
        if (vecs - v0 >= 2)
          ScoreAllRowsI8<2, kHd>(kt, tpb, 16 * v0, num_rows, st, span, off, prefetch);
        else
          ScoreAllRowsI8<1, kHd>(kt, tpb, 16 * v0, num_rows, st, span, off, prefetch);
      }
    }
    for (int32_t r = 0; r < num_rows; ++r) {
      prefetch.Step();
      const int32_t lo = kWindow ? std::clamp(args.FirstSeen(r) - p0, 0, span) : 0,
                    hi = std::clamp(len[r] - p0, 0, span);
      float* scores = st.probs + static_cast<int64_t>(r) * span;
      const float softcap = TreeMask(args, r, scores, p0, lo, hi);
      SoftmaxSpanToBytes(scores, st.p8 + static_cast<int64_t>(r) * span, lo, hi, i0 * tpb,
                         blocks * tpb, tpb, static_cast<int64_t>(tpb) * kHd,
                         static_cast<const int8_t*>(kv.v), tiles, softcap, &st.row_max[r],
                         &st.row_sum[r], &st.alpha[r], &st.ps[r]);
    }
    for (int32_t i = i0; i < blocks; ++i) {
      const int32_t pb = p0 + i * tpb;
      for (int32_t r = 0; r < num_rows; ++r) {
        st.valid[r] = std::clamp(len[r] - pb, 0, tpb);
        st.first[r] = kWindow ? std::clamp(args.FirstSeen(r) - pb, 0, tpb) : 0;
        if (st.first[r] >= st.valid[r]) st.first[r] = st.valid[r] = 0;
      }
      prefetch.Step();
      const auto* vt = static_cast<const int8_t*>(kv.v) + tiles[i];
      AccumulateVI8<kChunks>(vt, st.p8 + static_cast<int64_t>(i) * tpb, span, num_rows, st);
    }
    // The span's p . V: acc = acc * alpha + (integer sums) * the probabilities' scale.
    for (int32_t r = 0; r < num_rows; ++r) {
      float* a = st.acc + static_cast<int64_t>(r) * kHd;
      int32_t* s32 = st.acc32 + static_cast<int64_t>(r) * kHd;
      const __m512 ps = _mm512_set1_ps(st.ps[r]), al = _mm512_set1_ps(st.alpha[r]);
      for (int c = 0; c < kChunks; ++c) {
        const __m512 sums = _mm512_cvtepi32_ps(_mm512_loadu_si512(s32 + 16 * c));
        _mm512_storeu_ps(a + 16 * c,
                         _mm512_fmadd_ps(sums, ps, _mm512_mul_ps(_mm512_loadu_ps(a + 16 * c), al)));
        _mm512_storeu_si512(s32 + 16 * c, _mm512_setzero_si512());
      }
    }
  }
  for (int32_t r = 0; r < num_rows; ++r) {
    const __m512 inv = _mm512_set1_ps(1.0f / st.row_sum[r]);
    for (int c = 0; c < kChunks; ++c) {
      _mm512_storeu_ps(
          args.out[r] + 16 * c,
          _mm512_mul_ps(_mm512_loadu_ps(st.acc + static_cast<int64_t>(r) * kHd + 16 * c), inv));
    }
  }
}

template <int kChunks>
void AttendRowsI8OfWidth(const KvLayerView& kv, const AttendRowsArgs& args, float* scratch) {
  if (args.window > 0)
    AttendRowsI8Vec<kChunks, true>(kv, args, scratch);
  else
    AttendRowsI8Vec<kChunks, false>(kv, args, scratch);
}

}  // namespace

bool AttendRowsI8Avx512(const KvLayerView& kv, const AttendRowsArgs& args, float* scratch) {
  if (kv.tokens_per_block % 16 != 0) return false;
  switch (kv.head_dim) {
    case 16:
      AttendRowsI8OfWidth<1>(kv, args, scratch);
      return true;
    case 32:
      AttendRowsI8OfWidth<2>(kv, args, scratch);
      return true;
    case 64:
      AttendRowsI8OfWidth<4>(kv, args, scratch);
      return true;
    case 80:
      AttendRowsI8OfWidth<5>(kv, args, scratch);
      return true;
    case 96:
      AttendRowsI8OfWidth<6>(kv, args, scratch);
      return true;
    case 128:
      AttendRowsI8OfWidth<8>(kv, args, scratch);
      return true;
    case 256:
      AttendRowsI8OfWidth<16>(kv, args, scratch);
      return true;
    default:
      return false;
  }
}

}  // namespace inflight::kernels
