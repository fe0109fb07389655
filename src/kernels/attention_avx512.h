// Helpers of the AVX-512 attention kernels (kernels_avx512_attention*.cc): lane masks of a
// position range and Gemma 2's logit soft-capping. Only for files built with the AVX-512 flags.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/exp_avx512.h"
#include "kernels/kernels.h"

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

// Tree attention: row r's span scores s[lo, hi) (positions p0 + j) soft-capped here and those
// its tree hides set to -inf (capping after would make them finite again). Returns the
// soft-cap still to apply (0 once applied here; the args' when the rows have no tree).
inline float TreeMask(const AttendRowsArgs& args, int32_t r, float* s, int32_t p0, int32_t lo,
                      int32_t hi) {
  if (args.tree_bits == nullptr) return args.softcap;
  if (hi <= lo) return 0.0f;
  if (args.softcap > 0.0f) SoftCap(s, lo, hi, args.softcap);
  args.MaskTree(r, s + lo, p0 + lo, hi - lo);
  return 0.0f;
}

// The largest of a span's scores p[lo, hi) (relative positions) after soft-capping them in
// place; -inf for an empty range.
inline float SpanMax(float* p, int32_t lo, int32_t hi, float softcap) {
  if (hi <= lo) return -INFINITY;
  if (softcap > 0.0f) SoftCap(p, lo, hi, softcap);
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  for (int32_t j = lo & ~15; j < hi; j += 16) {
    const __mmask16 m = LaneRange(j, lo, hi);
    vmax = _mm512_mask_max_ps(vmax, m, vmax, _mm512_maskz_loadu_ps(m, p + j));
  }
  return _mm512_reduce_max_ps(vmax);
}

// One row's online-softmax update over a span's scores p[lo, hi) (relative positions):
// soft-cap, the new running max, the rescale factor of what was accumulated (alpha), and the
// probabilities exp(p - max) in place (lanes outside [lo, hi) of the touched vectors are 0).
inline void SoftmaxUpdate(float* p, int32_t lo, int32_t hi, float softcap, float* row_max,
                          float* row_sum, float* alpha) {
  *alpha = 1.0f;
  if (hi <= lo) return;
  const float new_max = std::fmax(*row_max, SpanMax(p, lo, hi, softcap));
  if (new_max == -INFINITY) {  // every position hidden so far (tree attention): nothing seen
    for (int32_t j = lo & ~15; j < hi; j += 16)
      _mm512_mask_storeu_ps(p + j, LaneRange(j, lo, hi), _mm512_setzero_ps());
    return;
  }
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

// Prefetches the next span's K and V tiles a few lines at a time between the current span's
// steps: a burst of every line at once fills the core's miss buffers and stalls it until
// memory answers, while lines spread over the span's work arrive as it computes.
class SpanPrefetch {
 public:
  SpanPrefetch(const void* k, const void* v, int64_t tile_bytes)
      : k_(static_cast<const char*>(k)),
        v_(static_cast<const char*>(v)),
        lines_per_tile_((tile_bytes + 63) / 64) {}

  // Starts on the tiles at byte offsets `offsets[0, n)`, spread over `steps` calls of Step.
  void Start(const int64_t* offsets, int32_t n, int32_t steps) {
    Finish();
    for (int32_t i = 0; i < n; ++i) offsets_[i] = offsets[i];
    total_ = static_cast<int64_t>(n) * 2 * lines_per_tile_;
    next_ = line_ = 0, tile_ = 0, in_v_ = false;
    per_step_ = steps > 0 ? (total_ + steps - 1) / steps : total_;
  }
  void Step() { Issue(per_step_); }
  void Finish() { Issue(total_ - next_); }

 private:
  // Lines go tile by tile, K's then V's (no division per line).
  void Issue(int64_t lines) {
    for (const int64_t end = std::min(total_, next_ + lines); next_ < end; ++next_) {
      _mm_prefetch((in_v_ ? v_ : k_) + offsets_[tile_] + 64 * line_, _MM_HINT_T0);
      if (++line_ == lines_per_tile_) {
        line_ = 0;
        if (in_v_) ++tile_;
        in_v_ = !in_v_;
      }
    }
  }
  const char* k_;
  const char* v_;
  int64_t lines_per_tile_;
  int64_t offsets_[kMaxSpanBlocks] = {};
  int64_t total_ = 0, next_ = 0, per_step_ = 0, line_ = 0;
  int32_t tile_ = 0;
  bool in_v_ = false;
};

}  // namespace inflight::kernels
