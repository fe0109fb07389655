#include "base/latency_histogram.h"

#include <algorithm>
#include <cmath>

namespace inflight {

const std::array<double, LatencyHistogram::kNumBounds>& LatencyHistogram::BoundsMs() {
  static const std::array<double, kNumBounds> bounds = [] {
    constexpr double kSteps[] = {1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8};
    std::array<double, kNumBounds> b{};
    double decade = 0.1;
    for (int i = 0; i < kNumBounds; ++i) {
      b[static_cast<size_t>(i)] = decade * kSteps[i % 10];
      if (i % 10 == 9) decade *= 10;
    }
    return b;
  }();
  return bounds;
}

void LatencyHistogram::Add(double ms, int64_t count) {
  if (count <= 0 || !(ms >= 0)) return;  // also drops NaN
  const auto& b = BoundsMs();
  const size_t i = static_cast<size_t>(std::lower_bound(b.begin(), b.end(), ms) - b.begin());
  counts_[i] += count;
  count_ += count;
  sum_ms_ += ms * static_cast<double>(count);
  max_ms_ = std::max(max_ms_, ms);
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  sum_ms_ += other.sum_ms_;
  max_ms_ = std::max(max_ms_, other.max_ms_);
}

double LatencyHistogram::Percentile(double q) const {
  if (count_ == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  const double rank = q * static_cast<double>(count_);
  const auto& b = BoundsMs();
  int64_t below = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    if (counts_[i] == 0) continue;
    if (static_cast<double>(below + counts_[i]) >= rank) {
      const double lo = i == 0 ? 0 : b[i - 1];
      const double hi = i < b.size() ? b[i] : max_ms_;
      const double within = (rank - static_cast<double>(below)) / static_cast<double>(counts_[i]);
      return std::min(max_ms_, lo + (std::max(hi, lo) - lo) * std::clamp(within, 0.0, 1.0));
    }
    below += counts_[i];
  }
  return max_ms_;
}

std::vector<double> LatencyHistogram::Rebucket(const std::vector<double>& bounds_ms) const {
  std::vector<double> out(bounds_ms.size() + 1, 0);
  const auto& b = BoundsMs();
  for (size_t i = 0; i < counts_.size(); ++i) {
    // Bucket i's values are <= b[i]: they land in the first coarse bucket whose bound holds it.
    const double upper = i < b.size() ? b[i] : INFINITY;
    const size_t j = static_cast<size_t>(
        std::lower_bound(bounds_ms.begin(), bounds_ms.end(), upper * (1 - 1e-12)) -
        bounds_ms.begin());
    out[j] += static_cast<double>(counts_[i]);
  }
  return out;
}

}  // namespace inflight
