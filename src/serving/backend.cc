#include "serving/backend.h"

#include "serving/ensemble_backend.h"
#include "serving/llm_backend.h"
#include "serving/text_backends.h"

namespace inflight::serving {
namespace {

bool HasInput(const inference::ModelConfig& c, const std::string& name) {
  for (const auto& in : c.input()) {
    if (in.name() == name) return true;
  }
  return false;
}

}  // namespace

InferResponse ErrorResponse(const Status& error) {
  InferResponse r;
  r.error = error;
  r.final = true;
  return r;
}

StatusOr<std::unique_ptr<ModelBackend>> CreateBackend(const inference::ModelConfig& config, const BackendContext& context) {
  if (config.platform() == "ensemble") {
    if (!config.has_ensemble_scheduling()) {
      return InvalidArgumentError("platform 'ensemble' needs ensemble_scheduling");
    }
    return CreateEnsembleBackend(config, context);
  }
  const std::string& backend = config.backend();
  // The reference repository runs preprocessing, postprocessing and BLS as python models; the
  // interface (input names) says which of the built-in implementations serves them.
  if (backend == "tensorrtllm" || backend == "inflight_llm" ||
      (backend == "python" && HasInput(config, "input_ids") && HasInput(config, "request_output_len"))) {
    return CreateLlmBackend(config, context);
  }
  if (backend == "inflight_tokenizer" || (backend == "python" && HasInput(config, "QUERY"))) {
    return CreateTokenizerBackend(config, context);
  }
  if (backend == "inflight_detokenizer" || (backend == "python" && HasInput(config, "TOKENS_BATCH"))) {
    return CreateDetokenizerBackend(config, context);
  }
  if (backend == "inflight_bls" || (backend == "python" && HasInput(config, "text_input"))) {
    return CreateBlsBackend(config, context);
  }
  if (backend.empty() && config.platform().empty()) {
    return InvalidArgumentError("config names neither 'backend' nor 'platform'");
  }
  return InvalidArgumentError("backend '" + (backend.empty() ? config.platform() : backend) +
                              "' is not supported: inflight serves ensemble, tensorrtllm and the "
                              "preprocessing/postprocessing/tensorrt_llm_bls python models");
}

}  // namespace inflight::serving
