#include "engine/step_cost.h"

#include <algorithm>
#include <cmath>

namespace inflight {

template <int N>
void StepCostModel::Fit<N>::Add(const std::array<double, N>& x, double y, double decay) {
  for (int i = 0; i < N; ++i) {
    for (int j = 0; j < N; ++j) xtx[i][j] = decay * xtx[i][j] + x[i] * x[j];
    xty[i] = decay * xty[i] + x[i] * y;
  }
  ++count;
  // Non-negative least squares by elimination: a coefficient that comes out negative (noise,
  // or a feature that never varied) is pinned at 0 and the rest refitted. The ridge (shrink,
  // and a tiny absolute one) keeps the system solvable before every feature has varied.
  std::array<bool, N> active;
  active.fill(true);
  for (int round = 0; round <= N; ++round) {
    std::array<std::array<double, N>, N> a{};
    std::array<double, N> b{};
    for (int i = 0; i < N; ++i) {
      for (int j = 0; j < N; ++j) a[i][j] = active[i] && active[j] ? xtx[i][j] : 0;
      a[i][i] += active[i] ? 1e-9 + shrink[i] * xtx[i][i] : 1;
      b[i] = active[i] ? xty[i] : 0;
    }
    for (int c = 0; c < N; ++c) {  // Gaussian elimination, partial pivoting
      int p = c;
      for (int r = c + 1; r < N; ++r)
        if (std::fabs(a[r][c]) > std::fabs(a[p][c])) p = r;
      std::swap(a[c], a[p]);
      std::swap(b[c], b[p]);
      for (int r = c + 1; r < N; ++r) {
        const double f = a[r][c] / a[c][c];
        for (int k = c; k < N; ++k) a[r][k] -= f * a[c][k];
        b[r] -= f * b[c];
      }
    }
    std::array<double, N> sol{};
    for (int c = N - 1; c >= 0; --c) {
      double s = b[c];
      for (int k = c + 1; k < N; ++k) s -= a[c][k] * sol[k];
      sol[c] = s / a[c][c];
    }
    bool negative = false;
    for (int i = 0; i < N; ++i) {
      if (active[i] && !(sol[i] >= 0)) active[i] = false, negative = true;
    }
    if (!negative) {
      for (int i = 0; i < N; ++i) coef[i] = active[i] ? sol[i] : 0;
      return;
    }
  }
  coef.fill(0);
}

void StepCostModel::Observe(const StepShape& shape, double forward_ms) {
  if (!(forward_ms >= 0) || !std::isfinite(forward_ms)) return;
  if (warmup_left_ > 0) {
    --warmup_left_;
    return;
  }
  if (shape.context_tokens <= 0) {
    decode_.Add({1.0, shape.decode_rows, shape.decode_positions / 1000}, forward_ms, decay_);
    return;
  }
  // Before any decode step, the whole step is the prompt's (its fixed cost folded in).
  const double residual = forward_ms - (decode_.count > 0 ? DecodeMs(shape) : 0);
  context_.Add({shape.context_tokens, shape.context_positions / 1000}, std::max(0.0, residual),
               decay_);
}

double StepCostModel::DecodeMs(const StepShape& s) const {
  return decode_.coef[0] + decode_.coef[1] * s.decode_rows +
         decode_.coef[2] * s.decode_positions / 1000;
}

double StepCostModel::PredictMs(const StepShape& s) const {
  return DecodeMs(s) + ms_per_context_token() * s.context_tokens +
         context_.coef[1] * s.context_positions / 1000;
}

}  // namespace inflight
