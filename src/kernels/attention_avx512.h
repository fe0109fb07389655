// Helpers of the AVX-512 attention kernels (kernels_avx512_attention*.cc): lane masks of a
// position range and Gemma 2's logit soft-capping. Only for files built with the AVX-512 flags.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/exp_avx512.h"

namespace inflight::kernels {

// Lanes j + i with lo <= j + i < hi (none when the range misses [j, j + 16)).
inline __mmask16 LaneRange(int32_t j, int32_t lo, int32_t hi) {
  const uint32_t below = hi - j >= 16 ? 0xffffu : (hi > j ? (1u << (hi - j)) - 1 : 0u);
  const uint32_t above = lo <= j ? 0xffffu : (lo - j >= 16 ? 0u : 0xffffu << (lo - j));
  return static_cast<__mmask16>(below & above);
}

// Prefetches `bytes` of K and of V at byte `offset` of their pools (the next block's tiles).
inline void PrefetchTiles(const void* k, const void* v, int64_t offset, int64_t bytes) {
  for (int64_t off = 0; off < bytes; off += 64) {
    _mm_prefetch(static_cast<const char*>(k) + offset + off, _MM_HINT_T0);
    _mm_prefetch(static_cast<const char*>(v) + offset + off, _MM_HINT_T0);
  }
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

// One row's online-softmax update over a span's scores p[lo, hi) (relative positions):
// soft-cap, the new running max, the rescale factor of what was accumulated (alpha), and the
// probabilities exp(p - max) in place (lanes outside [lo, hi) of the touched vectors are 0).
inline void SoftmaxUpdate(float* p, int32_t lo, int32_t hi, float softcap, float* row_max,
                          float* row_sum, float* alpha) {
  *alpha = 1.0f;
  if (hi <= lo) return;
  if (softcap > 0.0f) SoftCap(p, lo, hi, softcap);
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  for (int32_t j = lo & ~15; j < hi; j += 16) {
    const __mmask16 m = LaneRange(j, lo, hi);
    vmax = _mm512_mask_max_ps(vmax, m, vmax, _mm512_maskz_loadu_ps(m, p + j));
  }
  const float new_max = std::fmax(*row_max, _mm512_reduce_max_ps(vmax));
  const __m512 vnew = _mm512_set1_ps(new_max);
  __m512 vsum = _mm512_setzero_ps();
  for (int32_t j = lo & ~15; j < hi; j += 16) {
    const __mmask16 m = LaneRange(j, lo, hi);
    const __m512 e = _mm512_maskz_mov_ps(
        m, ExpNonPositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, p + j), vnew)));
    _mm512_mask_storeu_ps(p + j, m, e);
    vsum = _mm512_add_ps(vsum, e);
  }
  *alpha = std::exp(*row_max - new_max);
  *row_sum = *row_sum * *alpha + _mm512_reduce_add_ps(vsum);
  *row_max = new_max;
}

}  // namespace inflight::kernels
