#include "serving/backend.h"

#include "serving/ensemble_backend.h"
#include "serving/llm_backend.h"
#include "serving/model_config_util.h"
#include "serving/text_backends.h"

namespace inflight::serving {

InferResponse ErrorResponse(const Status& error) {
  InferResponse r;
  r.error = error;
  r.final = true;
  return r;
}

StatusOr<std::unique_ptr<ModelBackend>> CreateBackend(const inference::ModelConfig& config,
                                                      const BackendContext& context) {
  switch (KindOf(config)) {
    case BackendKind::kEnsemble:
      if (!config.has_ensemble_scheduling())
        return InvalidArgumentError("platform 'ensemble' needs ensemble_scheduling");
      return CreateEnsembleBackend(config, context);
    case BackendKind::kLlm:
      return CreateLlmBackend(config, context);
    case BackendKind::kTokenizer:
      return CreateTokenizerBackend(config, context);
    case BackendKind::kDetokenizer:
      return CreateDetokenizerBackend(config, context);
    case BackendKind::kBls:
      return CreateBlsBackend(config, context);
    case BackendKind::kUnknown:
      break;
  }
  const std::string& backend = config.backend();
  if (backend.empty() && config.platform().empty()) {
    return InvalidArgumentError("config names neither 'backend' nor 'platform'");
  }
  return InvalidArgumentError("backend '" + (backend.empty() ? config.platform() : backend) +
                              "' is not supported: inflight serves ensemble, tensorrtllm and the "
                              "preprocessing/postprocessing/tensorrt_llm_bls python models");
}

}  // namespace inflight::serving
