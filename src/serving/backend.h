// A model's implementation behind the serving core: the LLM (tensorrt_llm), the tokenizer
// (preprocessing), the detokenizer (postprocessing) and the ensemble/BLS composer.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "model_config.pb.h"
#include "serving/infer.h"
#include "serving/kv_events.h"
#include "serving/model_config_util.h"
#include "serving/tenancy.h"

namespace inflight {
class Tokenizer;
}

namespace inflight::serving {

class Metrics;
struct LlmLiveSnapshot;

// Runs requests for other models (what an ensemble or BLS model calls). Thread-safe.
class InferenceRunner {
 public:
  virtual ~InferenceRunner() = default;
  virtual void Infer(InferRequest request, ResponseSink sink) = 0;
  // The config of a loaded model (for an ensemble to read its steps' inputs).
  virtual StatusOr<inference::ModelConfig> ModelConfigOf(const std::string& name,
                                                         int64_t version) = 0;
};

struct BackendContext {
  std::string model_name;
  int64_t version = 1;
  std::string model_dir;    // <repository>/<model>
  std::string version_dir;  // <repository>/<model>/<version>
  InferenceRunner* runner = nullptr;
  Metrics* metrics = nullptr;
  // Canonical folders the files a config names must lie in (the repository, allow-listed
  // folders); see ConfinedPath.
  std::vector<std::string> allowed_roots;
  RequestLimits request_limits;
};

class ModelBackend {
 public:
  virtual ~ModelBackend() = default;
  // Runs a request whose inputs were already checked against the config (names, datatypes,
  // shapes). Calls `sink` with every response, exactly one of them final; never throws.
  // Thread-safe.
  virtual void Execute(InferRequest request, ResponseSink sink) = 0;
  // The tokenizer this model encodes or decodes with (preprocessing, postprocessing; the LLM
  // model's own when its weights carry one); null for models without one.
  virtual std::shared_ptr<const Tokenizer> tokenizer() const { return nullptr; }
  // Tokens a sequence may hold (prompt + output) for an LLM model; 0 for other models.
  virtual int64_t context_length() const { return 0; }
  // OK while the model can serve; an error once it cannot any more (a tensor/pipeline-parallel
  // rank died): the model and the server then report not ready.
  virtual Status Health() const { return OkStatus(); }
  // An LLM model fills the live view of its engine (the web dashboard) and returns true.
  virtual bool LiveSnapshot(LlmLiveSnapshot* /*out*/) const { return false; }
  // An LLM model's KV cache events after `after_id` (at most `max`), and a listing of its
  // reusable blocks with the last event it reflects; UNIMPLEMENTED for other models,
  // FAILED_PRECONDITION when its events are off.
  virtual StatusOr<KvEventsPage> KvEvents(uint64_t /*after_id*/, size_t /*max*/) const {
    return UnimplementedError("this model has no KV cache");
  }
  virtual StatusOr<KvCacheListing> KvCacheBlocks() const {
    return UnimplementedError("this model has no KV cache");
  }
};

// Makes the backend of one kind of model (see KindOf). INVALID_ARGUMENT naming the field for a
// bad config.
using BackendFactory = std::function<StatusOr<std::unique_ptr<ModelBackend>>(
    const inference::ModelConfig& config, const BackendContext& context)>;
// The backends the core does not implement itself, by kind: the LLM (tensorrtllm), the
// preprocessing and the postprocessing models. Filled from outside the core (the app, e.g. with
// LlmBackendFactories of src/backends/llm), so the core never includes a backend.
using BackendFactories = std::map<BackendKind, BackendFactory>;

// Chooses the backend from the config: platform "ensemble" and the tensorrt_llm_bls python model
// (the core's own); backend "tensorrtllm" (or a python model with the tensorrt_llm inputs) and
// python models with the preprocessing or postprocessing interfaces through `factories`.
// INVALID_ARGUMENT naming the field for a bad config or a kind without a factory.
StatusOr<std::unique_ptr<ModelBackend>> CreateBackend(const inference::ModelConfig& config,
                                                      const BackendContext& context,
                                                      const BackendFactories& factories);

// Convenience for backends: an error response that ends the request.
InferResponse ErrorResponse(const Status& error);

}  // namespace inflight::serving
