#include "serving/live_stats.h"

#include <algorithm>

namespace inflight::serving {
namespace {

constexpr double kTtftBoundsMs[] = {10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000};
// Each one of LatencyHistogram's bounds, so the chart is exact.
const std::vector<double> kItlBoundsMs = {5, 10, 25, 50, 100, 250, 500, 1000, 2500};
constexpr auto kRateWindow = std::chrono::seconds(2);

}  // namespace

void LlmLiveStats::AddSteps(const std::vector<EngineStep>& steps) {
  int64_t generated = 0;
  for (const EngineStep& s : steps) generated += s.num_generation_tokens;
  std::lock_guard<std::mutex> lock(mu_);
  for (const EngineStep& s : steps) {
    steps_.push_back(s);
    if (steps_.size() > kMaxSteps) steps_.pop_front();
  }
  const Clock::time_point now = Clock::now();
  generated_.emplace_back(now, generated);
  while (!generated_.empty() && now - generated_.front().first > kRateWindow)
    generated_.pop_front();
}

void LlmLiveStats::AddFinished(const LlmRequestRecord& stats) {
  const double ttft = stats.time_to_first_token_ms;
  std::lock_guard<std::mutex> lock(mu_);
  ++num_finished_;
  itl_.Merge(stats.inter_token_latency);
  if (stats.queue_ms >= 0) queue_.Add(stats.queue_ms);
  if (ttft < 0) return;  // ended before its first token
  ttft_.Add(ttft);
  if (ttft_counts_.empty()) ttft_counts_.assign(std::size(kTtftBoundsMs) + 1, 0);
  const size_t bucket = std::lower_bound(std::begin(kTtftBoundsMs), std::end(kTtftBoundsMs), ttft) -
                        std::begin(kTtftBoundsMs);
  ++ttft_counts_[bucket];
}

void LlmLiveStats::Fill(LlmLiveSnapshot* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  out->steps.assign(steps_.begin(), steps_.end());
  const Clock::time_point now = Clock::now();
  int64_t tokens = 0;
  for (const auto& [when, n] : generated_) {
    if (now - when <= kRateWindow) tokens += n;
  }
  out->generated_tokens_per_s =
      static_cast<double>(tokens) / std::chrono::duration<double>(kRateWindow).count();
  out->num_finished = num_finished_;
  out->ttft_bounds_ms.assign(std::begin(kTtftBoundsMs), std::end(kTtftBoundsMs));
  out->ttft_counts =
      ttft_counts_.empty() ? std::vector<int64_t>(std::size(kTtftBoundsMs) + 1, 0) : ttft_counts_;
  out->itl_bounds_ms = kItlBoundsMs;
  out->itl_counts.clear();
  for (double c : itl_.Rebucket(kItlBoundsMs)) out->itl_counts.push_back(static_cast<int64_t>(c));
  out->ttft_p50_ms = ttft_.Percentile(0.5), out->ttft_p99_ms = ttft_.Percentile(0.99);
  out->itl_p50_ms = itl_.Percentile(0.5), out->itl_p99_ms = itl_.Percentile(0.99);
  out->queue_p50_ms = queue_.Percentile(0.5), out->queue_p99_ms = queue_.Percentile(0.99);
}

}  // namespace inflight::serving
