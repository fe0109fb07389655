// The `tensorrt_llm` model: tensors in, the in-flight batching executor, tensors out, with
// the reference backend's input/output names, parameters, validation and messages. Also the
// factories of every backend in src/backends/llm.
#pragma once

#include <memory>

#include "serving/backend.h"

namespace inflight::serving {

// INVALID_ARGUMENT naming the parameter for a bad config; NOT_FOUND when gpt_model_path does
// not load.
StatusOr<std::unique_ptr<ModelBackend>> CreateLlmBackend(const inference::ModelConfig& config,
                                                         const BackendContext& context);

// The backends of this library for ServerOptions::backends: the tensorrt_llm model and the
// preprocessing (tokenizer) and postprocessing (detokenizer) python models.
BackendFactories LlmBackendFactories();

}  // namespace inflight::serving
