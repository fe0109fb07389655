// The serving core (Triton's "core" in spirit): the model repository and each model's
// lifecycle, request checks against the model config, routing to backends, statistics and
// metrics. Frontends (HTTP, gRPC) talk to this class only. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "serving/backend.h"
#include "serving/live_stats.h"
#include "serving/metrics.h"
#include "serving/tenancy.h"
#include "serving/trace.h"

namespace inflight::serving {

enum class ModelControlMode { kNone, kPoll, kExplicit };
StatusOr<ModelControlMode> ModelControlModeFromName(const std::string& name);

struct ServerOptions {
  std::string repository;
  ModelControlMode control_mode = ModelControlMode::kNone;
  std::vector<std::string> load_models;  // explicit mode: loaded at start ("*" = all)
  int32_t repository_poll_secs = 15;
  int32_t exit_timeout_secs = 30;
  std::string trace_file;  // where sampled request traces go (Triton's --trace-file)
  // Folders besides the repository that the files a model config names may lie in.
  std::vector<std::string> allowed_model_paths;
  RequestLimits request_limits;  // every LLM model checks its requests against these
  // The backends besides the core's own (ensemble, BLS): e.g. LlmBackendFactories().
  BackendFactories backends;
};

struct TensorMetadata {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
};

struct ModelMetadata {
  std::string name;
  std::vector<std::string> versions;
  std::string platform;
  std::vector<TensorMetadata> inputs, outputs;
};

struct RepositoryEntry {
  std::string name, version, state, reason;
};

struct Duration {
  uint64_t count = 0, ns = 0;
  void Add(uint64_t n) {
    ++count;
    ns += n;
  }
};

struct ResponseStats {
  Duration compute_infer, compute_output, success, fail, empty_response, cancel;
};

struct ModelStatistics {
  std::string name, version;
  uint64_t last_inference_ms = 0;
  uint64_t inference_count = 0, execution_count = 0;
  Duration success, fail, queue, compute_input, compute_infer, compute_output, cache_hit,
      cache_miss;
  std::map<uint64_t, ResponseStats> response_stats;
  Duration batch1_input, batch1_infer, batch1_output;  // the batch-size-1 record
};

class Server : public InferenceRunner {
 public:
  // Scans the repository and loads models by the control mode. A model that fails to load
  // is UNAVAILABLE with the reason; the server still starts (like Triton with
  // --exit-on-error=false). INVALID_ARGUMENT when the repository does not exist.
  static StatusOr<std::unique_ptr<Server>> Create(const ServerOptions& options);
  ~Server() override;

  bool live() const { return !shutting_down_.load(); }
  // Every model that should be loaded is READY.
  bool ready() const;

  // version "" means the newest ready version. NOT_FOUND for an unknown model/version.
  StatusOr<ModelMetadata> GetModelMetadata(const std::string& name,
                                           const std::string& version) const;
  StatusOr<inference::ModelConfig> GetModelConfig(const std::string& name,
                                                  const std::string& version) const;
  bool ModelReady(const std::string& name, const std::string& version) const;
  std::vector<RepositoryEntry> RepositoryIndex(bool ready_only) const;
  // UNAVAILABLE unless the control mode is explicit. config_json: a ModelConfig in JSON that
  // replaces config.pbtxt.
  Status LoadModel(const std::string& name, const std::optional<std::string>& config_json);
  Status UnloadModel(const std::string& name, bool unload_dependents);
  // All models when name is empty. NOT_FOUND for an unknown model.
  StatusOr<std::vector<ModelStatistics>> Statistics(const std::string& name,
                                                    const std::string& version) const;

  // Counts one request a text API served for `name` (an ensemble or BLS model) by running its
  // LLM model directly, in `name`'s statistics and metrics as if `name` had run it (the LLM
  // model counts its own requests). `first_response` is unset when none came.
  void RecordTextRequest(const std::string& name, std::chrono::steady_clock::time_point arrival,
                         std::optional<std::chrono::steady_clock::time_point> first_response,
                         const Status& result);

  // Checks the request against the model config and runs it; every outcome, errors included,
  // arrives through `sink` (exactly one final response).
  void Infer(InferRequest request, ResponseSink sink) override;
  StatusOr<inference::ModelConfig> ModelConfigOf(const std::string& name, int64_t version) override;

  // The tokenizer of a ready model's backend (see ModelBackend::tokenizer); null when the model
  // has none. NOT_FOUND for an unknown model.
  StatusOr<std::shared_ptr<const Tokenizer>> TokenizerOf(const std::string& name) const;
  // ModelBackend::context_length of a ready model. NOT_FOUND for an unknown model.
  StatusOr<int64_t> ContextLengthOf(const std::string& name) const;
  // The live view of every ready LLM model's engine (the web dashboard), by model name.
  std::vector<LlmLiveSnapshot> LiveSnapshots() const;
  // A loaded LLM model's KV cache events and block listing (ModelBackend::KvEvents,
  // KvCacheBlocks); NOT_FOUND for an unknown or unready model.
  StatusOr<KvEventsPage> KvEvents(const std::string& name, const std::string& version,
                                  uint64_t after_id, size_t max) const;
  StatusOr<KvCacheListing> KvCacheBlocks(const std::string& name, const std::string& version) const;

  Metrics& metrics() { return metrics_; }
  Tracer& tracer() { return tracer_; }
  // Requests started and not finished, over all models.
  int64_t num_inflight() const { return inflight_.load(); }
  // Stops taking requests, waits up to exit_timeout_secs for running ones, then unloads all.
  void Shutdown();

 private:
  struct Loaded;
  struct Entry;
  explicit Server(const ServerOptions& options);
  Status LoadLocked(const std::string& name, const std::optional<std::string>& config_json,
                    std::unique_lock<std::mutex>& lock);
  // Waits for the model's running requests until `deadline`, then destroys its backends.
  void UnloadLocked(const std::string& name, std::unique_lock<std::mutex>& lock,
                    std::chrono::steady_clock::time_point deadline);
  std::chrono::steady_clock::time_point UnloadDeadline() const {
    return std::chrono::steady_clock::now() + std::chrono::seconds(options_.exit_timeout_secs);
  }
  StatusOr<std::shared_ptr<Loaded>> Find(const std::string& name, const std::string& version) const;
  std::shared_ptr<Loaded> FindByNumber(const std::string& name, int64_t version) const;
  std::vector<std::string> ScanRepository() const;
  void PollLoop();
  // Waits for the running requests of `versions` until `deadline` (outside the lock), then
  // destroys their backends.
  void RetireLocked(std::map<int64_t, std::shared_ptr<Loaded>> versions,
                    std::unique_lock<std::mutex>& lock,
                    std::chrono::steady_clock::time_point deadline);
  // Versions a reload replaced: they finish their running requests (however long those take;
  // each request is bounded by its own limits) on retire_thread_, which then destroys them.
  // Shutdown cuts the wait at its deadline.
  void RetireLoop();
  struct Retiring {
    std::shared_ptr<Entry> entry;
    std::map<int64_t, std::shared_ptr<Loaded>> versions;
  };

  ServerOptions options_;
  std::vector<std::string> allowed_roots_;  // canonical: the repository and allowed_model_paths
  Metrics metrics_;
  Tracer tracer_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::shared_ptr<Entry>> models_;
  std::atomic<bool> shutting_down_{false};
  std::atomic<int64_t> inflight_{0};
  std::thread poll_thread_;
  std::vector<Retiring> retiring_;                 // under mu_
  std::atomic<int64_t> retire_cut_ns_{INT64_MAX};  // steady-clock ns when Shutdown cuts the wait
  std::thread retire_thread_;
};

}  // namespace inflight::serving
