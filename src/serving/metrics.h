// Prometheus metrics with Triton's and the TensorRT-LLM backend's family names and labels
// (spec section 6), so dashboards built for Triton keep working, plus latency histograms the
// reference lacks. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "serving/llm_stats.h"

namespace prometheus {
class Registry;
class Counter;
class Gauge;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace inflight::serving {

// One finished request of any model, as the server core saw it.
struct InferenceRecord {
  bool success = true;
  std::string failure_reason;  // REJECTED, CANCELED, BACKEND or OTHER
  int64_t request_us = 0;      // arrival -> final response
  int64_t queue_us = 0;
  int64_t compute_input_us = 0;
  int64_t compute_infer_us = 0;
  int64_t compute_output_us = 0;
  double first_response_ms = -1;  // < 0: no response with data
};

// What the LLM backend's stats thread reads from the executor.
struct LlmGaugeInput {
  bool has_iteration = false;
  EngineStep last;         // the newest step
  int32_t max_active = 0;  // max_batch_size of the executor
  KvBlocks blocks;         // the full group (layers attending to the whole context)
  KvBlocks window_blocks;  // the window group (sliding-window layers); total 0: none
  int32_t kv_window = 0;   // the window group's sliding window (tokens)
  int32_t tokens_per_block = 0;
  bool static_batching = false;
  int64_t num_queued = 0;
  struct DiskTier {
    bool on = false;
    int64_t files = 0, bytes = 0, hits = 0, written = 0, dropped = 0, rejected = 0, evicted = 0;
  } disk;  // the KV cache's disk tier (kvcache/kv_disk_store.h)
  struct HandoffSegments {
    bool on = false;
    int64_t written = 0, taken = 0, expired = 0, declined = 0, live_bytes = 0;
  } handoff;  // disaggregated serving's shared-memory segments (kvcache/kv_handoff_shm.h)
};

class Metrics {
 public:
  Metrics();
  ~Metrics();

  void RecordInference(const std::string& model, const std::string& version,
                       const InferenceRecord& r);
  void AddPending(const std::string& model, const std::string& version, int64_t delta);
  void SetModelLoadDuration(const std::string& model, const std::string& version, double seconds);
  void SetLlmGauges(const std::string& model, const std::string& version, const LlmGaugeInput& in);
  // Engine steps since the last call: counts, step time and the forward pass's share of it.
  void RecordEngineSteps(const std::string& model, const std::string& version,
                         const std::vector<EngineStep>& steps);
  // One finished LLM request: token-length and latency histograms.
  void ObserveLlmRequest(const std::string& model, const std::string& version,
                         const LlmRequestRecord& stats);

  // The text exposition format (refreshes the CPU gauges first).
  std::string Serialize();

 private:
  struct Families;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Families> f_;
  std::mutex mu_;  // Serialize against itself and against SetLlmGauges (a whole update)
  uint64_t last_cpu_total_ = 0, last_cpu_idle_ = 0;
};

}  // namespace inflight::serving
