// A live view of one LLM model's engine for the web dashboard: the recent steps (batch size,
// context and generation tokens, KV blocks, why requests waited, the latency target), generated
// tokens per second, and the latency histograms of finished requests (time to first token,
// every token's inter-token latency, queue time) with their p50 / p99. Written by the LLM
// backend's stats and delivery threads, read by the dashboard's; thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "serving/llm_stats.h"

namespace inflight::serving {

struct LlmLiveSnapshot {
  std::string model;
  int32_t max_batch_size = 0, max_num_tokens = 0, tokens_per_block = 0;
  // Now (not per step): requests holding state or running, waiting to start, KV blocks.
  int64_t num_unfinished = 0, num_queued = 0;
  KvBlocks blocks;                     // the full group (layers attending to the whole context)
  KvBlocks window_blocks;              // the window group (sliding-window layers); total 0: none
  int32_t kv_window = 0;               // the window group's sliding window (tokens)
  std::vector<EngineStep> steps;       // the most recent, oldest first
  double generated_tokens_per_s = 0;   // decode tokens over the last two seconds
  int64_t num_finished = 0;            // requests finished since load
  std::vector<double> ttft_bounds_ms;  // histogram upper bounds; one more count for the rest
  std::vector<int64_t> ttft_counts;
  std::vector<double> itl_bounds_ms;  // the inter-token latency's, the same way
  std::vector<int64_t> itl_counts;
  // Percentiles since load (0 before the first finished request).
  double ttft_p50_ms = 0, ttft_p99_ms = 0;
  double itl_p50_ms = 0, itl_p99_ms = 0;
  double queue_p50_ms = 0, queue_p99_ms = 0;
};

class LlmLiveStats {
 public:
  static constexpr size_t kMaxSteps = 120;

  void AddSteps(const std::vector<EngineStep>& steps);
  void AddFinished(const LlmRequestRecord& stats);
  // Fills the step, rate and histogram fields of `out`.
  void Fill(LlmLiveSnapshot* out) const;

 private:
  using Clock = std::chrono::steady_clock;
  mutable std::mutex mu_;
  std::deque<EngineStep> steps_;
  std::deque<std::pair<Clock::time_point, int64_t>> generated_;  // (when, tokens) per AddSteps
  int64_t num_finished_ = 0;
  std::vector<int64_t> ttft_counts_;
  LatencyHistogram ttft_, itl_, queue_;
};

}  // namespace inflight::serving
