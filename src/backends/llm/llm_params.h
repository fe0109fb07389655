// The tensorrt_llm model's config parameters read into the executor's and the parallel runner's
// settings, and the tensor/pipeline-parallel runner those settings ask for.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "engine/executor_config.h"
#include "model_config.pb.h"
#include "parallel/parallel_runner.h"
#include "serving/backend.h"

namespace inflight::serving {

struct LlmParams {
  ExecutorConfig executor;
  int64_t lora_cache_bytes = int64_t{1} << 30;  // lora_cache_host_memory_bytes
  bool exclude_input_in_output = false;
  int64_t stats_period_ms = 100;
  bool unbounded_queue = false;       // max_queue_size < 0
  parallel::ParallelConfig parallel;  // tensor_parallel_size, pipeline_parallel_size, ...
};

// INVALID_ARGUMENT naming the parameter for a bad value.
StatusOr<LlmParams> ReadParams(const inference::ModelConfig& config);

// decoding_mode medusa: the heads of medusa_model_path (confined like the model) checked
// against the model, quantized as medusa_weights says, and the tree of medusa_choices.
Status LoadMedusaHeads(const inference::ModelConfig& config, const BackendContext& context,
                       const inflight::ModelConfig& model, ExecutorConfig* e);

// decoding_mode eagle: the EAGLE-3 or EAGLE-1/2 head of eagle_model_path (confined like the model)
// checked against the model, quantized as eagle_weights says, and the tree of eagle_choices.
Status LoadEagleHead(const inference::ModelConfig& config, const BackendContext& context,
                     const inflight::Model& model, ExecutorConfig* e);

// Leader mode (started by mpirun): the world's ranks; orchestrator mode: workers spawned
// for this model (executor_worker_path, default this program). *holds_world: the runner took
// the MPI world (release it with parallel::ReleaseWorld when done).
StatusOr<std::unique_ptr<parallel::ParallelModelRunner>> CreateParallelRunner(
    const inference::ModelConfig& config, const BackendContext& context,
    const std::string& model_path, const LlmParams& params, bool* holds_world);

}  // namespace inflight::serving
