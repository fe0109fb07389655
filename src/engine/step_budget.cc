#include "engine/step_budget.h"

#include <algorithm>
#include <cmath>

#include "base/logging.h"

namespace inflight {

double StepBudget::Begin(const StepShape& decode) {
  if (decode.decode_rows <= 0 || !cost_.ready()) {
    unmet_ = false;
    return kNoLimit;
  }
  const double decode_ms = cost_.DecodeMs(decode) + overhead_ms_;
  effective_target_ms_ = target_ms_ > 0 ? target_ms_ : 2 * decode_ms;
  const double left = effective_target_ms_ - decode_ms;
  // The decode rows alone take the whole target: it cannot be met.
  const bool unmet = left <= 0;
  if (unmet && !unmet_) {
    INFLIGHT_LOG(kWarning) << "max_inter_token_latency_ms " << effective_target_ms_
                           << " cannot be met: " << decode.decode_rows
                           << " decode rows alone take ~" << decode_ms
                           << " ms a step; prompts run unbudgeted until it can";
  }
  unmet_ = unmet;
  return unmet ? kNoLimit : left;
}

void StepBudget::ObserveOverhead(double ms) {
  if (!(ms >= 0) || !std::isfinite(ms)) return;
  overhead_ms_ = overhead_ms_ == 0 ? ms : 0.9 * overhead_ms_ + 0.1 * ms;
}

double StepBudget::CostMs(int64_t start_pos, int32_t tokens) const {
  const double n = tokens;
  return cost_.ms_per_context_token() * n +
         cost_.ms_per_kilo_context_position() * AttendedPositions(start_pos, n) / 1000;
}

int32_t StepBudget::TokensFor(double ms, int64_t start_pos, int32_t want, bool first) const {
  if (want <= 0) return 0;
  int32_t n = want;
  if (std::isfinite(ms) && CostMs(start_pos, want) > ms) {
    // The largest n with CostMs(n) <= ms (CostMs grows with n): bisection.
    int32_t lo = 0, hi = want;
    while (lo < hi) {
      const int32_t mid = lo + (hi - lo + 1) / 2;
      if (CostMs(start_pos, mid) <= ms)
        lo = mid;
      else
        hi = mid - 1;
    }
    n = lo;
  }
  if (first) n = std::max(n, std::min(want, min_tokens_));
  return n;
}

}  // namespace inflight
