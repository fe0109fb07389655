// AVX-512 (F/BW/VL/VNNI) + F16C + FMA kernels. Built with those flags; only called after the
// CPU check in kernels.cc.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/attention.h"
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

// exp(x) for x <= 0 (softmax after subtracting the max): Cephes' expf polynomial with
// ln 2 split in two, scaled by 2^n with vscalefps.
inline __m512 ExpNonPositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

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

// Lanes j + i with lo <= j + i < hi (j < hi).
inline __mmask16 LaneRange(int32_t j, int32_t lo, int32_t hi) {
  const uint32_t below = hi - j >= 16 ? 0xffffu : (1u << (hi - j)) - 1;
  return static_cast<__mmask16>(lo <= j ? below : below & (0xffffu << (lo - j)));
}

// tanh as Cephes' tanhf: an odd polynomial below |x| = 0.625, (1 - e) / (1 + e) with
// e = exp(-2|x|) <= 0.29 above (no cancellation), the sign of x put back.
inline __m512 TanhPs(__m512 x) {
  const __m512 z = _mm512_mul_ps(x, x);
  __m512 p = _mm512_set1_ps(-5.70498872745e-3f);
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(2.06390887954e-2f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-5.37397155531e-2f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(1.33314422036e-1f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-3.33332819422e-1f));
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, z), x, x);
  const __m512 ax = _mm512_abs_ps(x), one = _mm512_set1_ps(1.0f);
  const __m512 e = ExpNonPositive(_mm512_mul_ps(ax, _mm512_set1_ps(-2.0f)));
  const __m512 large = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN));
  const __m512 signed_large =
      _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(large), sign));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.625f), _CMP_LT_OQ),
                              signed_large, small);
}

// p[lo, hi) = softcap * tanh(p / softcap) (Gemma 2's logit soft-capping).
inline void SoftCap(float* p, int32_t lo, int32_t hi, float softcap) {
  const __m512 cap = _mm512_set1_ps(softcap);
  for (int32_t j = lo & ~15; j < hi; j += 16) {
    const __mmask16 m = LaneRange(j, lo, hi);
    const __m512 x = _mm512_maskz_loadu_ps(m, p + j);
    _mm512_mask_storeu_ps(p + j, m, _mm512_mul_ps(cap, TanhPs(_mm512_div_ps(x, cap))));
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
        const int64_t next = kv.TileOffset(args.block_table[b + 1], args.kv_head) * elem_bytes;
        for (int64_t off = 0; off < tile_bytes; off += 64) {
          _mm_prefetch(static_cast<const char*>(kv.k) + next + off, _MM_HINT_T0);
          _mm_prefetch(static_cast<const char*>(kv.v) + next + off, _MM_HINT_T0);
        }
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
      alpha[r] = 1.0f;
      if (hi <= lo) continue;
      float* p = probs + static_cast<int64_t>(r) * span;
      if (args.softcap > 0.0f) SoftCap(p, lo, hi, args.softcap);
      __m512 vmax = _mm512_set1_ps(-INFINITY);
      for (int32_t j = lo & ~15; j < hi; j += 16) {
        const __mmask16 m = LaneRange(j, lo, hi);
        vmax = _mm512_mask_max_ps(vmax, m, vmax, _mm512_maskz_loadu_ps(m, p + j));
      }
      const float new_max = std::fmax(row_max[r], _mm512_reduce_max_ps(vmax));
      const __m512 vnew = _mm512_set1_ps(new_max);
      __m512 vsum = _mm512_setzero_ps();
      for (int32_t j = lo & ~15; j < hi; j += 16) {
        const __mmask16 m = LaneRange(j, lo, hi);
        const __m512 e = _mm512_maskz_mov_ps(
            m, ExpNonPositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, p + j), vnew)));
        _mm512_mask_storeu_ps(p + j, m, e);
        vsum = _mm512_add_ps(vsum, e);
      }
      alpha[r] = std::exp(row_max[r] - new_max);
      row_sum[r] = row_sum[r] * alpha[r] + _mm512_reduce_add_ps(vsum);
      row_max[r] = new_max;
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
    default:
      break;
  }
  if (!done) GetKernels(SimdLevel::kScalar).attend_rows(kv, args, scratch);
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
