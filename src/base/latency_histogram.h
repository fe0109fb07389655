// A fixed-bucket histogram of latencies in milliseconds, for per-request inter-token latency
// and the percentiles reported from it. Bounded memory whatever the request's length; bucket
// bounds run 1-1.25-1.5-2-2.5-3-4-5-6-8 per decade from 0.1 ms to 80 s, so they hold every
// bound of the Prometheus latency buckets (5 ms ... 60 s) and a percentile read from them is
// within one bucket (at most 1.33x) of the exact value.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace inflight {

class LatencyHistogram {
 public:
  static constexpr int kNumBounds = 60;
  // Upper bounds (inclusive) of buckets 0..kNumBounds-1; bucket kNumBounds holds the rest.
  static const std::array<double, kNumBounds>& BoundsMs();

  // `count` samples of `ms` each (a step that produced several tokens at once).
  void Add(double ms, int64_t count = 1);
  void Merge(const LatencyHistogram& other);

  int64_t count() const { return count_; }
  double sum_ms() const { return sum_ms_; }
  double max_ms() const { return max_ms_; }
  double mean_ms() const { return count_ > 0 ? sum_ms_ / static_cast<double>(count_) : 0; }
  const std::array<int64_t, kNumBounds + 1>& counts() const { return counts_; }
  // The q-quantile (0..1), interpolated inside its bucket and capped at the largest sample;
  // 0 when empty.
  double Percentile(double q) const;
  // Sample counts per bucket of `bounds_ms` (ascending, each one of BoundsMs()), plus one for
  // the rest: for a coarser histogram such as Prometheus's.
  std::vector<double> Rebucket(const std::vector<double>& bounds_ms) const;

 private:
  std::array<int64_t, kNumBounds + 1> counts_{};
  int64_t count_ = 0;
  double sum_ms_ = 0, max_ms_ = 0;
};

}  // namespace inflight
