// inflight-generate --prompts-file: every request of a JSON-lines file through the in-flight
// batching executor (like trtllm-bench or vLLM's offline generate).
#pragma once

#include <string>

#include "engine/executor_config.h"
#include "model/model.h"
#include "sampling/sampler.h"

namespace inflight {

struct OfflineOptions {
  std::string prompts_file;
  std::string steps_file;  // when set: every engine step's statistics, one JSON line each
  ExecutorConfig executor;
  SamplingParams default_sampling;  // fields a line leaves out
  int32_t default_max_tokens = 32;
  bool ignore_eos = false;
  bool add_special = true;
  bool print_text = true;
};

// Prints one JSON line per request (in file order) and a summary line; returns the exit code.
int RunOfflineBatch(const Model& model, const OfflineOptions& options);

}  // namespace inflight
