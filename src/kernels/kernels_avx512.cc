// AVX-512 (F/BW/VL/VNNI) + F16C + FMA kernels. Built with those flags; only called after the
// CPU check in kernels.cc.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/attention.h"
#include "kernels/exp_avx512.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "kernels/packed_layout.h"
#include "kernels/row_groups_avx512.h"
#include "kernels/token_passes.h"

namespace inflight::kernels {
namespace {

inline float HalfToFloat(uint16_t h) { return _cvtsh_ss(h); }

inline float ReduceAdd(__m512 v) { return _mm512_reduce_add_ps(v); }

// [lo x8 | hi x8]
inline __m512 SplitBroadcast(float lo, float hi) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(lo)), _mm256_set1_ps(hi), 1);
}

void QuantizeRowsQ8Avx512(const float* x, int64_t num_tokens, int64_t cols, QuantizedRows* out) {
  const int64_t nb = cols / kQBlock;
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + t * cols + b * kQBlock;
      const __m512 v0 = _mm512_loadu_ps(xb);
      const __m512 v1 = _mm512_loadu_ps(xb + 16);
      const float amax = _mm512_reduce_max_ps(
          _mm512_max_ps(_mm512_and_ps(v0, abs_mask), _mm512_and_ps(v1, abs_mask)));
      const float d = amax / 127.0f;
      const float id = d != 0 ? 1.0f / d : 0.0f;
      const __m512 vid = _mm512_set1_ps(id);
      const __m512i q0 = _mm512_cvtps_epi32(_mm512_roundscale_ps(
          _mm512_mul_ps(v0, vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      const __m512i q1 = _mm512_cvtps_epi32(_mm512_roundscale_ps(
          _mm512_mul_ps(v1, vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      const __m128i b0 = _mm512_cvtsepi32_epi8(q0);
      const __m128i b1 = _mm512_cvtsepi32_epi8(q1);
      int8_t* qs = out->qs + t * cols + b * kQBlock;
      uint8_t* qu = out->qu + t * cols + b * kQBlock;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qs), b0);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16), b1);
      const __m128i bias = _mm_set1_epi8(static_cast<char>(0x80));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qu), _mm_xor_si128(b0, bias));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qu + 16), _mm_xor_si128(b1, bias));
      out->d[t * nb + b] = _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
      const int32_t s0 = _mm512_reduce_add_epi32(q0), s1 = _mm512_reduce_add_epi32(q1);
      out->sum[t * nb + b] = s0 + s1;
      out->sum16[2 * (t * nb + b)] = s0;
      out->sum16[2 * (t * nb + b) + 1] = s1;
    }
  }
}

// ---- F32 activations x F32 / F16 / BF16 weights ----
// Loads 16 weights as F32; `mask` selects the valid lanes of a tail.
template <DType kType>
inline __m512 LoadWeights(const void* row, int64_t i, __mmask16 mask) {
  if constexpr (kType == DType::kF32) {
    return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(row) + i);
  } else if constexpr (kType == DType::kF16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(row) + i));
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(row) + i);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// out[k] = dot(row, x + k * cols) for k < N. Two accumulators per token, fixed order.
template <DType kType, int N>
inline void DotFloatRowN(const void* row, const float* x, int64_t cols, float* out) {
  __m512 acc0[N], acc1[N];
  for (int k = 0; k < N; ++k) acc0[k] = acc1[k] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= cols; i += 32) {
    const __m512 w0 = LoadWeights<kType>(row, i, 0xffff);
    const __m512 w1 = LoadWeights<kType>(row, i + 16, 0xffff);
    for (int k = 0; k < N; ++k) {
      acc0[k] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + k * cols + i), acc0[k]);
      acc1[k] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + k * cols + i + 16), acc1[k]);
    }
  }
  for (; i < cols; i += 16) {
    const int64_t rem = cols - i;
    const __mmask16 m = rem >= 16 ? 0xffff : static_cast<__mmask16>((1u << rem) - 1);
    const __m512 w0 = LoadWeights<kType>(row, i, m);
    for (int k = 0; k < N; ++k) {
      acc0[k] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m, x + k * cols + i), acc0[k]);
    }
  }
  for (int k = 0; k < N; ++k) out[k] = ReduceAdd(_mm512_add_ps(acc0[k], acc1[k]));
}

inline int32_t HorizontalSum256(__m256i s) {
  __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  h = _mm_hadd_epi32(h, h);
  h = _mm_hadd_epi32(h, h);
  return _mm_cvtsi128_si32(h);
}

// ---- Q8_0 / Q4_0 weights x Q8_0 activations (VNNI) ----
// Two blocks per 512-bit step; lanes 0-7 hold block b's partial sums, 8-15 block b+1's.

template <int N>
inline void DotQ8_0RowN(const BlockQ8_0* w, const QuantizedRows& x, int64_t t0, int64_t nb,
                        float* out) {
  const __m512i c128 = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[N];
  for (int k = 0; k < N; ++k) acc[k] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m512i wq = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b + 1].qs)), 1);
    // (q + 128) . w - 128 * sum(w) == q . w
    const __m512i bias = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c128, wq);
    const __m512 dw = SplitBroadcast(HalfToFloat(w[b].d), HalfToFloat(w[b + 1].d));
    for (int k = 0; k < N; ++k) {
      const int64_t t = t0 + k;
      const __m512i xu = _mm512_loadu_si512(x.qu + t * x.cols + b * kQBlock);
      const __m512i s = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), xu, wq), bias);
      const __m512 sc = _mm512_mul_ps(dw, SplitBroadcast(x.d[t * nb + b], x.d[t * nb + b + 1]));
      acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), sc, acc[k]);
    }
  }
  for (int k = 0; k < N; ++k) out[k] = ReduceAdd(acc[k]);
  if (b < nb) {  // odd block count: one 256-bit step
    const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
    const __m256i bias =
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(static_cast<char>(0x80)), wq);
    const float dw = HalfToFloat(w[b].d);
    for (int k = 0; k < N; ++k) {
      const int64_t t = t0 + k;
      const __m256i xu =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qu + t * x.cols + b * kQBlock));
      const __m256i s = _mm256_sub_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), xu, wq), bias);
      out[k] += static_cast<float>(HorizontalSum256(s)) * (dw * x.d[t * nb + b]);
    }
  }
}

// Unpacks a Q4_0 block's 16 bytes into 32 unsigned nibbles (0..15) in block order.
inline __m256i UnpackQ4(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i lo = _mm_and_si128(raw, _mm_set1_epi8(15));
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(15));
  return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

template <int N>
inline void DotQ4_0RowN(const BlockQ4_0* w, const QuantizedRows& x, int64_t t0, int64_t nb,
                        float* out) {
  const __m512i c8 = _mm512_set1_epi8(8);
  __m512 acc[N];
  for (int k = 0; k < N; ++k) acc[k] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m512i wq =
        _mm512_inserti64x4(_mm512_castsi256_si512(UnpackQ4(w[b].qs)), UnpackQ4(w[b + 1].qs), 1);
    const __m512 dw = SplitBroadcast(HalfToFloat(w[b].d), HalfToFloat(w[b + 1].d));
    for (int k = 0; k < N; ++k) {
      const int64_t t = t0 + k;
      const __m512i xs = _mm512_loadu_si512(x.qs + t * x.cols + b * kQBlock);
      // (n - 8) . q == n . q - 8 * sum(q)
      const __m512i s = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wq, xs),
                                         _mm512_dpbusd_epi32(_mm512_setzero_si512(), c8, xs));
      const __m512 sc = _mm512_mul_ps(dw, SplitBroadcast(x.d[t * nb + b], x.d[t * nb + b + 1]));
      acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), sc, acc[k]);
    }
  }
  for (int k = 0; k < N; ++k) out[k] = ReduceAdd(acc[k]);
  if (b < nb) {
    const __m256i wq = UnpackQ4(w[b].qs);
    const float dw = HalfToFloat(w[b].d);
    for (int k = 0; k < N; ++k) {
      const int64_t t = t0 + k;
      const __m256i xs =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + t * x.cols + b * kQBlock));
      const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), wq, xs);
      const int32_t sumi = HorizontalSum256(s) - 8 * x.sum[t * nb + b];
      out[k] += static_cast<float>(sumi) * (dw * x.d[t * nb + b]);
    }
  }
}

// Computes all tokens for one weight row, four tokens per pass.
template <typename RowFn>
inline void ForTokenGroups(int64_t num_tokens, float* y, int64_t y_stride, int64_t r, RowFn&& fn) {
  float out[4];
  int64_t t = 0;
  for (; t + 4 <= num_tokens; t += 4) {
    fn.template operator()<4>(t, out);
    for (int k = 0; k < 4; ++k) y[(t + k) * y_stride + r] = out[k];
  }
  switch (num_tokens - t) {
    case 3:
      fn.template operator()<3>(t, out);
      break;
    case 2:
      fn.template operator()<2>(t, out);
      break;
    case 1:
      fn.template operator()<1>(t, out);
      break;
    default:
      return;
  }
  for (int64_t k = 0; t + k < num_tokens; ++k) y[(t + k) * y_stride + r] = out[k];
}

// ---- Interleaved Q8_0 / Q4_0 (kernels/interleave.h): 16 rows x NT tokens per pass ----
// Per block: the 16 rows' int32 dots accumulate over 8 dpbusd (4 columns each), then one
// correction, conversion and fma per token scales them: the float work per block is shared by
// 16 rows. Each (row, token) result is acc = fma(float(dot - corr), dw * dx, acc) in block
// order, whatever NT is and however the blocks are tiled (a tile's partial sums wait in
// `partial` as floats, exactly): bit-identical to the scalar twin and batch-invariant.
// Blocks [b0, b1) of G consecutive 16-row groups (G = 1 or 2) for tokens t0..t0+NT-1: each
// activation broadcast feeds G groups, each weight vector NT tokens. acc starts from `partial`
// ([token][G * 16] floats; zero at b0 == 0) and is left there. `pf_phase`/`pf_period`: pull
// block b + 32 (the next tile) into L2 when b % pf_period == pf_phase.
template <bool kQ8, int G, int NT>
inline void InterleavedGroup(const uint8_t* group, int64_t b0, int64_t b1, int64_t nb,
                             const QuantizedRows& x, int64_t t0, float* partial, int pf_phase,
                             int pf_period) {
  constexpr int64_t kBlockBytes = kInterleaveRows * (kQ8 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0));
  constexpr int64_t kAhead = 32;  // blocks: the next column tile (or group), one tile ahead
  const int64_t cols = x.cols, group_bytes = nb * kBlockBytes;
  __m512 acc[G][NT];
  for (int g = 0; g < G; ++g) {
    for (int k = 0; k < NT; ++k)
      acc[g][k] = b0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(partial + 16 * (G * k + g));
  }
  const __m512i low4 = _mm512_set1_epi8(15);
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* blk[G];
    __m512 dw[G];
    for (int g = 0; g < G; ++g) {
      blk[g] = group + g * group_bytes + b * kBlockBytes;
      if (b % pf_period == pf_phase) {
        for (int64_t off = 0; off < kBlockBytes; off += 64)
          _mm_prefetch(reinterpret_cast<const char*>(blk[g] + kAhead * kBlockBytes + off),
                       _MM_HINT_T1);
      }
      dw[g] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[g])));
    }
    // Each dot starts at minus the zero-point correction (the same int32 as subtracting it at
    // the end, one vector operation less per token).
    __m512i dot[G][NT];
    for (int k = 0; k < NT; ++k) {
      const __m512i start = _mm512_set1_epi32(-(kQ8 ? 128 : 8) * x.sum[(t0 + k) * nb + b]);
      for (int g = 0; g < G; ++g) dot[g][k] = start;
    }
    if constexpr (kQ8) {
      for (int q = 0; q < 8; ++q) {
        __m512i w[G];
        for (int g = 0; g < G; ++g)
          w[g] = _mm512_loadu_si512(blk[g] + 2 * kInterleaveRows + q * 64);
        for (int k = 0; k < NT; ++k) {
          int32_t xq;
          std::memcpy(&xq, x.qs + (t0 + k) * cols + b * kQBlock + 4 * q, 4);
          const __m512i xv = _mm512_set1_epi32(xq);
          for (int g = 0; g < G; ++g) dot[g][k] = _mm512_dpbusd_epi32(dot[g][k], w[g], xv);
        }
      }
    } else {
      for (int q = 0; q < 4; ++q) {
        __m512i lo[G], hi[G];
        for (int g = 0; g < G; ++g) {
          const __m512i v = _mm512_loadu_si512(blk[g] + 2 * kInterleaveRows + q * 64);
          lo[g] = _mm512_and_si512(v, low4);
          hi[g] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
        }
        for (int k = 0; k < NT; ++k) {
          const int8_t* xs = x.qs + (t0 + k) * cols + b * kQBlock;
          int32_t xlo, xhi;
          std::memcpy(&xlo, xs + 4 * q, 4);
          std::memcpy(&xhi, xs + 16 + 4 * q, 4);
          const __m512i vlo = _mm512_set1_epi32(xlo), vhi = _mm512_set1_epi32(xhi);
          for (int g = 0; g < G; ++g) {
            dot[g][k] = _mm512_dpbusd_epi32(dot[g][k], lo[g], vlo);
            dot[g][k] = _mm512_dpbusd_epi32(dot[g][k], hi[g], vhi);
          }
        }
      }
    }
    for (int k = 0; k < NT; ++k) {
      const __m512 dx = _mm512_set1_ps(x.d[(t0 + k) * nb + b]);
      for (int g = 0; g < G; ++g) {
        acc[g][k] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[g][k]), _mm512_mul_ps(dw[g], dx), acc[g][k]);
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    for (int k = 0; k < NT; ++k) _mm512_storeu_ps(partial + 16 * (G * k + g), acc[g][k]);
  }
}

template <bool kQ8>
void MatMulInterleaved(const TensorView& w, int64_t row_begin, int64_t row_end,
                       const QuantizedRows& x, int64_t num_tokens, float* y, int64_t y_stride) {
  constexpr int64_t kBlockBytes = kInterleaveRows * (kQ8 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0));
  // Column tiles of 32 blocks (1024 columns, ~17 KB of a Q8_0 group) keep a group's tile and
  // the tokens' activations in L1 across the token passes, however wide the matrix.
  constexpr int64_t kTileBlocks = 32;
  const int64_t nb = w.cols / kQBlock;
  const auto* base = static_cast<const uint8_t*>(w.data);
  ForRowGroups(row_begin, row_end, nb, kTileBlocks, num_tokens, 4, y, y_stride,
               [&]<int G>(int64_t first_group, int64_t b0, int64_t b1, float* partial) {
                 const uint8_t* group = base + first_group * nb * kBlockBytes;
                 ForTokenPasses<6>(num_tokens, [&]<int N>(int64_t t, int pf_phase, int pf_period) {
                   InterleavedGroup<kQ8, G, N>(group, b0, b1, nb, x, t, partial + 16 * G * t,
                                               pf_phase, pf_period);
                 });
               });
}

void MatMulRowsAvx512(const TensorView& w, int64_t row_begin, int64_t row_end, const float* x,
                      const QuantizedRows* xq, int64_t num_tokens, float* y, int64_t y_stride) {
  if (w.dtype == DType::kI16x16) {
    if (xq != nullptr && xq->q16 != nullptr)
      return MatMulI16Avx512(w, row_begin, row_end, xq->q16, xq->d16, num_tokens, y, y_stride);
    thread_local std::vector<int16_t> q;  // callers without MatMulScratch::ToI16
    thread_local std::vector<float> d;
    q.resize(static_cast<size_t>(num_tokens * w.cols));
    d.resize(static_cast<size_t>(num_tokens * (w.cols / kI16Block)));
    QuantizeRowsI16Avx512(x, num_tokens, w.cols, q.data(), d.data());
    return MatMulI16Avx512(w, row_begin, row_end, q.data(), d.data(), num_tokens, y, y_stride);
  }
  if (w.dtype == DType::kQ8_0x16)
    return MatMulInterleaved<true>(w, row_begin, row_end, *xq, num_tokens, y, y_stride);
  if (w.dtype == DType::kQ4_0x16)
    return MatMulInterleaved<false>(w, row_begin, row_end, *xq, num_tokens, y, y_stride);
  if (const PackedLayout* l = FindPackedLayout(w.dtype); l && l->packed == w.dtype) {
    return MatMulPackedAvx512(*l, w, row_begin, row_end, *xq, num_tokens, y, y_stride);
  }
  const int64_t cols = w.cols;
  const int64_t nb = cols / kQBlock;
  // Row tiles keep a few weight rows hot in L1/L2 while all tokens pass over them.
  constexpr int64_t kRowTile = 16;
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kRowTile) {
    const int64_t r1 = r0 + kRowTile < row_end ? r0 + kRowTile : row_end;
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* row = w.row(r);
      switch (w.dtype) {
        case DType::kF32:
          ForTokenGroups(num_tokens, y, y_stride, r, [&]<int N>(int64_t t, float* out) {
            DotFloatRowN<DType::kF32, N>(row, x + t * cols, cols, out);
          });
          break;
        case DType::kF16:
          ForTokenGroups(num_tokens, y, y_stride, r, [&]<int N>(int64_t t, float* out) {
            DotFloatRowN<DType::kF16, N>(row, x + t * cols, cols, out);
          });
          break;
        case DType::kBF16:
          ForTokenGroups(num_tokens, y, y_stride, r, [&]<int N>(int64_t t, float* out) {
            DotFloatRowN<DType::kBF16, N>(row, x + t * cols, cols, out);
          });
          break;
        case DType::kQ8_0:
          ForTokenGroups(num_tokens, y, y_stride, r, [&]<int N>(int64_t t, float* out) {
            DotQ8_0RowN<N>(reinterpret_cast<const BlockQ8_0*>(row), *xq, t, nb, out);
          });
          break;
        case DType::kQ4_0:
          ForTokenGroups(num_tokens, y, y_stride, r, [&]<int N>(int64_t t, float* out) {
            DotQ4_0RowN<N>(reinterpret_cast<const BlockQ4_0*>(row), *xq, t, nb, out);
          });
          break;
        default:
          std::abort();
      }
    }
  }
}

float DotF32Avx512(const float* a, const float* b, int64_t n) {
  float out;
  DotFloatRowN<DType::kF32, 1>(b, a, n, &out);
  return out;
}

float DotF32F16Avx512(const float* a, const uint16_t* b, int64_t n) {
  float out;
  DotFloatRowN<DType::kF16, 1>(b, a, n, &out);
  return out;
}

void AxpyF32Avx512(float* y, float a, const float* x, int64_t n) {
  const __m512 va = _mm512_set1_ps(a);
  for (int64_t i = 0; i < n; i += 16) {
    const int64_t rem = n - i;
    const __mmask16 m = rem >= 16 ? 0xffff : static_cast<__mmask16>((1u << rem) - 1);
    const __m512 v =
        _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
    _mm512_mask_storeu_ps(y + i, m, v);
  }
}

void AxpyF16Avx512(float* y, float a, const uint16_t* x, int64_t n) {
  const __m512 va = _mm512_set1_ps(a);
  for (int64_t i = 0; i < n; i += 16) {
    const int64_t rem = n - i;
    const __mmask16 m = rem >= 16 ? 0xffff : static_cast<__mmask16>((1u << rem) - 1);
    const __m512 xv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i));
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, xv, _mm512_maskz_loadu_ps(m, y + i)));
  }
}

}  // namespace

float SumExpAvx512(const float* x, int64_t n, float mx) {
  const __m512 vmx = _mm512_set1_ps(mx);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 e = ExpNonPositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmx));
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(m, e));
  }
  return _mm512_reduce_add_ps(sum);
}

// silu(g) * up with sigmoid from exp(-|g|) (never overflows): 1 / (1 + e) for g >= 0,
// e / (1 + e) below.
void SiluMulAvx512(float* gate, const float* up, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 e = ExpNonPositive(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(g)));
    const __mmask16 negative = _mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_LT_OQ);
    const __m512 numerator = _mm512_mask_blend_ps(negative, one, e);
    const __m512 sigmoid = _mm512_div_ps(numerator, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(
        gate + i, m, _mm512_mul_ps(_mm512_mul_ps(g, sigmoid), _mm512_maskz_loadu_ps(m, up + i)));
  }
}

void F32ToF16Avx512(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_mask_storeu_epi16(out + i, m, h);
  }
}

// Two passes: the maximum (max_ps with the running value second skips NaNs), then the
// first position equal to it; the scalar twin's answer, including its tie and NaN rules.
int64_t ArgMaxAvx512(const float* x, int64_t n) {
  if (std::isnan(x[0])) return 0;
  __m512 mx = _mm512_set1_ps(x[0]);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - i)) - 1);
    mx = _mm512_mask_max_ps(mx, m, _mm512_maskz_loadu_ps(m, x + i), mx);
  }
  const float best = _mm512_reduce_max_ps(mx);
  const __m512 vb = _mm512_set1_ps(best);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __mmask16 eq =
        _mm512_mask_cmp_ps_mask(m, _mm512_maskz_loadu_ps(m, x + i), vb, _CMP_EQ_OQ);
    if (eq != 0) return i + __builtin_ctz(eq);
  }
  return 0;
}

const KernelTable& Avx512KernelTable() {
  static const KernelTable table = {SimdLevel::kAvx512, QuantizeRowsQ8Avx512, MatMulRowsAvx512,
                                    DotF32Avx512,       DotF32F16Avx512,      AxpyF32Avx512,
                                    AxpyF16Avx512,      SumExpAvx512,         AttendRowsAvx512,
                                    SiluMulAvx512,      F32ToF16Avx512,       QuantizeRowsI16Avx512,
                                    ArgMaxAvx512};
  return table;
}

}  // namespace inflight::kernels
