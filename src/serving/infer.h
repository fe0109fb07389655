// One inference request and its responses as the serving core sees them, whatever protocol
// brought them (KServe HTTP, generate, gRPC, OpenAI).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "base/output_credit.h"
#include "base/status.h"
#include "serving/infer_tensor.h"

namespace inflight::serving {

using ParamValue = std::variant<bool, int64_t, double, std::string>;
using ParamMap = std::map<std::string, ParamValue>;

// Set once by whoever learns the client is gone (disconnect, gRPC cancel, stop request);
// callbacks registered by backends (cancel the engine request) run at that moment.
// Thread-safe.
class CancelToken {
 public:
  bool cancelled() const { return cancelled_.load(); }
  void Cancel();
  // Runs `fn` now if already cancelled, else when Cancel is called.
  void OnCancel(std::function<void()> fn);

 private:
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::vector<std::function<void()>> callbacks_;
};

// State an ensemble shares between the steps of one request (e.g. the detokenizer's
// per-sequence incremental state). Thread-safe.
class RequestContext {
 public:
  template <typename T>
  std::shared_ptr<T> GetOrCreate(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = slots_[key];
    if (!slot) slot = std::make_shared<T>();
    return std::static_pointer_cast<T>(slot);
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<void>> slots_;
};

// Tokens a request used (prompt + generated, over all its LLM steps), for per-tenant token
// rate limits. The LLM backend adds to it; thread-safe.
class UsageMeter {
 public:
  void Add(int64_t tokens) { tokens_.fetch_add(tokens, std::memory_order_relaxed); }
  int64_t tokens() const { return tokens_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> tokens_{0};
};

struct InferRequest {
  std::string model_name;
  int64_t model_version = -1;  // -1: the newest ready version
  std::string id;
  ParamMap parameters;
  std::vector<InferTensor> inputs;
  std::vector<std::string> requested_outputs;  // empty: all outputs
  std::shared_ptr<CancelToken> cancel = std::make_shared<CancelToken>();
  std::shared_ptr<RequestContext> context;  // set by an ensemble for its steps
  std::shared_ptr<UsageMeter> usage;        // set by a frontend that limits the tenant's tokens
  // Who sent it (the frontends' access layer: the API key's tenant, or the client address):
  // a `stop` request reaches only the same tenant's requests of that id.
  std::string tenant;
  // The client's output on its way out (set by a streaming frontend; an ensemble passes it to
  // its steps): the LLM backend counts its results in it and its engine pauses the request
  // while the client is behind (see OutputCredit).
  std::shared_ptr<OutputCredit> output_credit;

  const InferTensor* FindInput(const std::string& name) const;
};

struct InferResponse {
  std::string model_name;
  std::string model_version;
  std::string id;
  ParamMap parameters;
  std::vector<InferTensor> outputs;
  Status error;        // not OK: the request failed (final is set)
  bool final = false;  // the request's last response
  bool empty() const { return outputs.empty() && error.ok(); }
};

// Receives a request's responses in order, exactly one with final set. May be called on any
// serving thread (an LLM model's delivery thread for its responses; never the engine thread,
// which only pushes into output streams); must not block for long.
using ResponseSink = std::function<void(InferResponse&&)>;

}  // namespace inflight::serving
