// AVX-512 VNNI matmul over int16 blocks (DType::kI16x16: F16 and BF16 weights, see
// kernels_internal.h), and the activations' int16 blocks. Built with AVX-512 flags; only called
// after the CPU check in kernels.cc. Bit-identical to the scalar twins in kernels_scalar.cc.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/interleave.h"
#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"

namespace inflight::kernels {

// ---- int16 blocks (kI16x16, kernels_internal.h): vpdpwssd, G groups x NT tokens per pass ----
// Per column pair: one 64-byte load per group (16 rows x 2 columns), one vpdpwssd per group and
// token against the broadcast pair of int16 activations; per 64-column block the int32 dots
// (exact) scale into the F32 accumulators: acc = fma(float(dot), s * d, acc), block by block in
// order from 0 whatever G, NT and the tiling are: the scalar twin's sequence, batch-invariant.

void QuantizeRowsI16Avx512(const float* x, int64_t num_tokens, int64_t cols, int16_t* q, float* d) {
  const int64_t nb = cols / kI16Block;
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512 max_finite = _mm512_set1_ps(std::numeric_limits<float>::max());
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + t * cols + b * kI16Block;
      __m512 v[4], m = _mm512_setzero_ps();
      __mmask16 non_finite = 0;  // NaN (unordered) or above FLT_MAX
      for (int i = 0; i < 4; ++i) {
        v[i] = _mm512_loadu_ps(xb + 16 * i);
        const __m512 a = _mm512_and_ps(v[i], abs_mask);
        m = _mm512_max_ps(m, a);
        non_finite |= _mm512_cmp_ps_mask(a, max_finite, _CMP_NLE_UQ);
      }
      const float scale = I16Scale(_mm512_reduce_max_ps(m), non_finite == 0);
      // A non-finite block's quants are 0 (its NaN scale carries it), as in the scalar twin.
      const float inv = non_finite == 0 ? I16Inverse(scale) : 0.0f;
      if (non_finite != 0) {
        for (int i = 0; i < 4; ++i) v[i] = _mm512_setzero_ps();
      }
      const __m512 vi = _mm512_set1_ps(inv);
      for (int i = 0; i < 4; ++i) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + t * cols + b * kI16Block + 16 * i),
                            _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(v[i], vi))));
      }
      d[t * nb + b] = scale;
    }
  }
}

namespace {

// G groups (16 rows each) x NT tokens over blocks [b0, b1); acc in partial[g][token][16].
template <int G, int NT>
inline void I16Tile(const uint8_t* group, int64_t group_bytes, int64_t b0, int64_t b1,
                    const int16_t* q, const float* d, int64_t cols, int64_t nb, int64_t t0,
                    float* partial, int64_t partial_stride) {
  __m512 acc[G][NT];
  for (int g = 0; g < G; ++g) {
    for (int k = 0; k < NT; ++k)
      acc[g][k] =
          b0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(partial + g * partial_stride + 16 * k);
  }
  for (int64_t b = b0; b < b1; ++b) {
    __m512i dot[G][NT];
    for (int g = 0; g < G; ++g) {
      for (int k = 0; k < NT; ++k) dot[g][k] = _mm512_setzero_si512();
    }
    const uint8_t* rec = group + b * kI16RecordBytes;
    const int16_t* xb = q + t0 * cols + b * kI16Block;
    for (int p = 0; p < kI16Block / 2; ++p) {
      __m512i wv[G];
      for (int g = 0; g < G; ++g) wv[g] = _mm512_loadu_si512(rec + g * group_bytes + 64 + 64 * p);
      for (int k = 0; k < NT; ++k) {
        int32_t pair;
        std::memcpy(&pair, xb + k * cols + 2 * p, 4);
        const __m512i xv = _mm512_set1_epi32(pair);
        for (int g = 0; g < G; ++g) dot[g][k] = _mm512_dpwssd_epi32(dot[g][k], wv[g], xv);
      }
    }
    for (int g = 0; g < G; ++g) {
      const __m512 sc = _mm512_loadu_ps(reinterpret_cast<const float*>(rec + g * group_bytes));
      for (int k = 0; k < NT; ++k) {
        const __m512 scale = _mm512_mul_ps(sc, _mm512_set1_ps(d[(t0 + k) * nb + b]));
        acc[g][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[g][k]), scale, acc[g][k]);
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    for (int k = 0; k < NT; ++k) _mm512_storeu_ps(partial + g * partial_stride + 16 * k, acc[g][k]);
  }
}

// G groups over all blocks for every token: column tiles of 4 blocks (G x 8.25 KB of weights,
// in L1 across the token passes), passes of 6 tokens.
template <int G>
void I16Groups(const uint8_t* group, int64_t group_bytes, const int16_t* q, const float* d,
               int64_t cols, int64_t num_tokens, float* partial, int64_t partial_stride) {
  constexpr int64_t kTile = 4;
  constexpr int kNT = 6;
  const int64_t nb = cols / kI16Block;
  for (int64_t b0 = 0; b0 < nb; b0 += kTile) {
    const int64_t b1 = std::min(nb, b0 + kTile);
    int64_t t = 0;
    for (; t + kNT <= num_tokens; t += kNT)
      I16Tile<G, kNT>(group, group_bytes, b0, b1, q, d, cols, nb, t, partial + 16 * t,
                      partial_stride);
    float* part = partial + 16 * t;
    switch (num_tokens - t) {
      case 5:
        I16Tile<G, 5>(group, group_bytes, b0, b1, q, d, cols, nb, t, part, partial_stride);
        break;
      case 4:
        I16Tile<G, 4>(group, group_bytes, b0, b1, q, d, cols, nb, t, part, partial_stride);
        break;
      case 3:
        I16Tile<G, 3>(group, group_bytes, b0, b1, q, d, cols, nb, t, part, partial_stride);
        break;
      case 2:
        I16Tile<G, 2>(group, group_bytes, b0, b1, q, d, cols, nb, t, part, partial_stride);
        break;
      case 1:
        I16Tile<G, 1>(group, group_bytes, b0, b1, q, d, cols, nb, t, part, partial_stride);
        break;
      default:
        break;
    }
  }
}

}  // namespace

void MatMulI16Avx512(const TensorView& w, int64_t row_begin, int64_t row_end, const int16_t* q,
                     const float* d, int64_t num_tokens, float* y, int64_t y_stride) {
  const int64_t nb = w.cols / kI16Block, group_bytes = nb * kI16RecordBytes;
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t partial_stride = std::max<int64_t>(num_tokens, 1) * 16;
  thread_local std::vector<float> partial;  // [4 groups][num_tokens][16]
  if (partial.size() < static_cast<size_t>(4 * partial_stride))
    partial.resize(static_cast<size_t>(4 * partial_stride));
  for (int64_t r0 = row_begin; r0 < row_end;) {
    const uint8_t* group = base + r0 / kInterleaveRows * group_bytes;
    const int64_t left = (row_end - r0 + kInterleaveRows - 1) / kInterleaveRows;
    // One token streams the weights: 4 groups keep 4 chains in flight. More tokens share
    // each weight load between 6 of them, 2 groups each.
    const int groups = num_tokens == 1 && left >= 4 ? 4 : left >= 2 ? 2 : 1;
    if (groups == 4)
      I16Groups<4>(group, group_bytes, q, d, w.cols, num_tokens, partial.data(), partial_stride);
    else if (groups == 2)
      I16Groups<2>(group, group_bytes, q, d, w.cols, num_tokens, partial.data(), partial_stride);
    else
      I16Groups<1>(group, group_bytes, q, d, w.cols, num_tokens, partial.data(), partial_stride);
    for (int g = 0; g < groups; ++g) {
      const int64_t rg = r0 + g * kInterleaveRows;
      const int64_t valid = std::min<int64_t>(kInterleaveRows, row_end - rg);
      const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1);
      for (int64_t t = 0; t < num_tokens; ++t) {
        _mm512_mask_storeu_ps(y + t * y_stride + rg, mask,
                              _mm512_loadu_ps(partial.data() + g * partial_stride + 16 * t));
      }
    }
    r0 += groups * kInterleaveRows;
  }
}

}  // namespace inflight::kernels
