// Triton's trace extension: settings (global and per model) and TIMESTAMPS traces of
// sampled requests, written as Triton's JSON to the trace file. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace inflight::serving {

struct TraceSettings {
  std::string level = "OFF";  // OFF or TIMESTAMPS (TENSORS is refused)
  int64_t rate = 1000;        // trace one request in `rate`
  int64_t count = -1;         // traces left; -1 = unlimited
  int64_t log_frequency = 0;  // write after this many traces; 0 = at shutdown
};

// The timestamps of one traced request (system clock, ns since the epoch, as Triton).
struct RequestTrace {
  uint64_t id = 0;
  std::string model, version;
  std::vector<std::pair<std::string, uint64_t>> timestamps;
};

class Tracer {
 public:
  // trace_file: where traces go ("" = traces are kept in memory only); read-only over the
  // network, as in Triton.
  explicit Tracer(std::string trace_file);
  ~Tracer();

  // model "" = the global settings. A model without its own settings shows the global ones.
  std::map<std::string, std::vector<std::string>> Settings(const std::string& model) const;
  // Updates the given keys (values as Triton sends them: strings or, for trace_level, a
  // list); an empty list clears a model's override of that key. INVALID_ARGUMENT for bad
  // values, UNIMPLEMENTED for trace_file or TENSORS.
  Status Update(const std::string& model,
                const std::map<std::string, std::optional<std::vector<std::string>>>& values);

  // Whether to trace the next request of `model` (sampling and count applied). 0 = no.
  uint64_t Sample(const std::string& model);
  void Record(RequestTrace trace);
  // Writes what is buffered to the trace file.
  void Flush();
  // Traces recorded so far (for tests and the file writer).
  size_t num_recorded() const;

  static uint64_t NowNs();

 private:
  TraceSettings EffectiveLocked(const std::string& model) const;
  void WriteLocked();

  const std::string file_;
  mutable std::mutex mu_;
  TraceSettings global_;
  std::map<std::string, std::map<std::string, std::string>> overrides_;  // model -> key -> value
  std::map<std::string, int64_t> seen_;                                  // requests per model
  uint64_t next_id_ = 1;
  size_t recorded_ = 0;
  std::vector<RequestTrace> pending_;
  bool wrote_any_ = false;
};

}  // namespace inflight::serving
